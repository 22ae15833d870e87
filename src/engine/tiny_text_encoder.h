// The built-in tiny model's text encoder: a random-weight Qwen3.5 text model
// in the HF layout (text_encoder/config.json, model.safetensors,
// tokenizer.json, tokenizer_config.json) with the hidden size of the tiny
// DiT's text_in_channels (64), so `magi2 generate --prompt` runs end to end.
#pragma once

#include <cstdint>
#include <string>

#include "models/qwen35/text_config.h"

namespace magi2 {

/// config.json of the tiny text encoder: model_type qwen3_5_text, the values
/// of shared/golden/qwen35_text_tiny/text_encoder/config.json (hidden 64,
/// 8 layers [lin, lin, lin, full] x 2, MLP 160, 4/2 heads x 32, DeltaNet 2/6
/// heads x 16, conv 4, partial rotary 0.25, theta 1e7) with vocab_size, pad
/// and eos ids from tiny_tokenizer_json().
std::string tiny_text_config_json();

/// A byte-level BPE tokenizer.json in the Qwen3.5 format, generated here:
/// the 256 byte symbols (id = byte value), up to 500 merges learned
/// deterministically from the default negative prompt (which every generate
/// run encodes), the special tokens <|endoftext|>, <|im_start|>, <|im_end|>
/// after them; NFC normaliser,
/// the Qwen3.5 Split + ByteLevel pre-tokenizer, ByteLevel post-processor and
/// decoder. Any UTF-8 text encodes (every byte has a symbol).
std::string tiny_tokenizer_json();

/// tokenizer_config.json matching tiny_tokenizer_json() (Qwen3_5Tokenizer).
std::string tiny_tokenizer_config_json();

/// Writes `dir` (an existing empty folder): the three JSON files above and
/// model.safetensors with every tensor of the config in bf16, seeded random
/// per tensor name (the same generator as the tiny DiT: FNV-1a(name) ^ seed,
/// SplitMix64 + Box-Muller), scaled so activations stay O(1). Errors: a file
/// cannot be written (magi2::Error naming it).
void write_tiny_text_encoder(const std::string& dir, uint64_t seed);

/// tiny_text_config_json() with the widths, layer count, layer kinds, rope
/// values and vocab_size of `c` (the special ids stay the generated
/// tokenizer's, so that tokenizer serves any vocabulary at least as large):
/// the config.json of a random text encoder at other widths (make-random:
/// the Qwen3.5-27B widths). Errors: c.vocab_size smaller than the tokenizer's
/// ids, c.full_attention not one entry per layer.
std::string text_encoder_config_json(const qwen35::TextConfig& c);

/// write_tiny_text_encoder for any config.json text (`config_json`, e.g.
/// text_encoder_config_json()): the generated tokenizer files and
/// model.safetensors drawn by the same per-name recipe, streamed one tensor
/// at a time and filled on every core (the release widths are ~2.5 GB of
/// embedding plus ~0.75 GB per layer). `sync`: fsync each file (off inside a
/// folder renamed into place when complete). Errors: the config does not
/// parse (naming dir/config.json), a file cannot be written.
void write_text_encoder(const std::string& dir, const std::string& config_json, uint64_t seed, bool sync);

}  // namespace magi2
