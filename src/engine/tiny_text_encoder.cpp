#include "engine/tiny_text_encoder.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "models/qwen35/prompt.h"
#include "models/qwen35/text_config.h"
#include "models/qwen35/text_weights.h"
#include "models/qwen35/tok_pretokenize.h"
#include "models/qwen35/tok_unicode.h"
#include "core/seeded_random.h"
#include "core/seeded_tensor.h"

namespace magi2 {

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

// The golden qwen35_text_tiny config; vocab_size and the special ids are set
// from the generated tokenizer (256 bytes + merges + 3 specials, rounded up to 64).
constexpr const char* kTinyTextConfig = R"JSON({
  "architectures": ["Qwen3_5TextModel"],
  "model_type": "qwen3_5_text",
  "dtype": "bfloat16",
  "hidden_size": 64,
  "num_hidden_layers": 8,
  "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention",
                  "linear_attention", "linear_attention", "linear_attention", "full_attention"],
  "intermediate_size": 160,
  "hidden_act": "silu",
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "head_dim": 32,
  "attention_bias": false,
  "attention_dropout": 0.0,
  "linear_conv_kernel_dim": 4,
  "linear_key_head_dim": 16,
  "linear_num_key_heads": 2,
  "linear_num_value_heads": 6,
  "linear_value_head_dim": 16,
  "max_position_embeddings": 8192,
  "partial_rotary_factor": 0.25,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {"mrope_interleaved": true, "mrope_section": [2, 1, 1], "partial_rotary_factor": 0.25,
                      "rope_theta": 10000000.0, "rope_type": "default"},
  "tie_word_embeddings": false,
  "vocab_size": 0,
  "pad_token_id": 0,
  "eos_token_id": 0,
  "bos_token_id": null
})JSON";

const char* const kSpecials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
constexpr int kMaxMerges = 500;

std::string byte_symbol(unsigned char b) { return qwen35::utf8_encode(std::u32string(1, qwen35::byte_to_unicode(b))); }

// BPE merges learned here, deterministically, from the text the tiny model
// always encodes: the official default negative prompt (so its 1721 bytes
// become a few hundred tokens rather than one per byte). Words are split as
// the Qwen3.5 pattern roughly does (an optional leading space or mark, then
// letters); pairs never cross words. Each round merges the most frequent
// adjacent pair (ties: the lexicographically smallest), until kMaxMerges or
// every word is one symbol.
const std::vector<std::pair<std::string, std::string>>& tiny_merges() {
  static const std::vector<std::pair<std::string, std::string>> merges = [] {
    const std::string_view text = qwen35::default_negative_prompt();
    std::map<std::string, int> word_counts;
    for (size_t i = 0; i < text.size();) {
      size_t j = i + 1;
      auto letter = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; };
      if (letter(text[i]) || (j < text.size() && letter(text[j])))
        while (j < text.size() && letter(text[j])) ++j;
      word_counts[std::string(text.substr(i, j - i))] += 1;
      i = j;
    }
    std::vector<std::pair<std::vector<std::string>, int>> words;
    for (const auto& [w, n] : word_counts) {
      std::vector<std::string> syms;
      for (unsigned char c : w) syms.push_back(byte_symbol(c));
      words.emplace_back(std::move(syms), n);
    }
    std::vector<std::pair<std::string, std::string>> out;
    while (static_cast<int>(out.size()) < kMaxMerges) {
      std::map<std::pair<std::string, std::string>, int> pairs;
      for (const auto& [syms, n] : words)
        for (size_t k = 0; k + 1 < syms.size(); ++k) pairs[{syms[k], syms[k + 1]}] += n;
      const std::pair<std::string, std::string>* best = nullptr;
      int best_n = 0;
      for (const auto& [pr, n] : pairs)  // std::map order: the first maximum is the smallest pair
        if (n > best_n) best = &pr, best_n = n;
      if (!best) break;
      const auto chosen = *best;
      out.push_back(chosen);
      for (auto& [syms, n] : words) {
        std::vector<std::string> next;
        for (size_t k = 0; k < syms.size(); ++k) {
          if (k + 1 < syms.size() && syms[k] == chosen.first && syms[k + 1] == chosen.second) {
            next.push_back(chosen.first + chosen.second);
            ++k;
          } else {
            next.push_back(syms[k]);
          }
        }
        syms = std::move(next);
      }
    }
    return out;
  }();
  return merges;
}

int first_special_id() { return 256 + static_cast<int>(tiny_merges().size()); }

// The Qwen3.5 pre-tokenizer split pattern (tokenizer.json of the release).
constexpr const char* kSplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

ojson added_token(int id, const char* content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// Init per tensor (transformers conventions, scaled to keep a random network's
// activations O(1)): gains 1 + w near 1, A_log = log U(1, 16), dt_bias near 1.
// Chosen once per tensor (not per element: the release widths have billions).
struct TextDraw {
  bool log_uniform = false;  // A_log: log(1 + 15 U)
  double mean = 0, sd = 1;   // otherwise N(mean, sd)
  double operator()(uint64_t key, uint64_t i) const {
    return log_uniform ? std::log(1.0 + 15.0 * unit_uniform(key, i)) : normal_sample(key, i, mean, sd);
  }
};

TextDraw text_draw(const std::string& name, const Shape& shape) {
  auto ends = [&](const char* s) { return name.ends_with(s); };
  if (ends("A_log")) return {true};
  if (ends("dt_bias")) return {false, 1.0, 0.1};
  if (ends("linear_attn.norm.weight")) return {false, 1.0, 0.1};  // plain gain
  if (ends("norm.weight")) return {false, 0.0, 0.1};              // gain 1 + w
  if (ends("embed_tokens.weight")) return {false, 0.0, 1.0};
  const double in = static_cast<double>(shape.back());
  if (ends("conv1d.weight")) return {false, 0.0, 1.0 / std::sqrt(in)};
  const bool output = ends("out_proj.weight") || ends("o_proj.weight") || ends("down_proj.weight");
  return {false, 0.0, (output ? 0.5 : 1.0) / std::sqrt(in)};
}

}  // namespace

std::string tiny_text_config_json() {
  ojson c = ojson::parse(kTinyTextConfig);
  const int specials = first_special_id();
  c["vocab_size"] = (specials + 3 + 63) / 64 * 64;  // the embedding rows, a multiple of 64 as in the release
  c["pad_token_id"] = specials;                     // <|endoftext|>
  c["eos_token_id"] = specials + 2;                 // <|im_end|>
  return c.dump(2) + "\n";
}

std::string tiny_tokenizer_json() {
  ojson vocab = ojson::object();
  for (int b = 0; b < 256; ++b) vocab[byte_symbol(static_cast<unsigned char>(b))] = b;
  ojson merges = ojson::array();
  int next = 256;
  for (const auto& [l, r] : tiny_merges()) {
    const std::string merged = l + r;
    if (!vocab.contains(merged)) vocab[merged] = next++;
    merges.push_back({l, r});
  }
  ojson added = ojson::array();
  for (int i = 0; i < 3; ++i) added.push_back(added_token(first_special_id() + i, kSpecials[i]));
  ojson t = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", kSplitRegex}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}}};
  return t.dump(2) + "\n";
}

std::string tiny_tokenizer_config_json() {
  ojson dec = ojson::object();
  for (int i = 0; i < 3; ++i) {
    ojson e = added_token(first_special_id() + i, kSpecials[i]);
    e.erase("id");
    dec[std::to_string(first_special_id() + i)] = e;
  }
  ojson c = {{"add_prefix_space", false},     {"added_tokens_decoder", dec},
             {"bos_token", nullptr},          {"clean_up_tokenization_spaces", false},
             {"eos_token", "<|im_end|>"},     {"errors", "replace"},
             {"model_max_length", 262144},    {"pad_token", "<|endoftext|>"},
             {"split_special_tokens", false}, {"tokenizer_class", "Qwen3_5Tokenizer"},
             {"unk_token", nullptr}};
  return c.dump(2) + "\n";
}

std::string text_encoder_config_json(const qwen35::TextConfig& c) {
  ojson j = ojson::parse(tiny_text_config_json());
  const int tokens = j["vocab_size"].get<int>();
  MAGI2_CHECK(c.vocab_size >= tokens, "text encoder config: vocab_size ", c.vocab_size,
              " cannot hold the generated tokenizer's ", tokens, " ids");
  MAGI2_CHECK(static_cast<int>(c.full_attention.size()) == c.num_hidden_layers,
              "text encoder config: ", c.full_attention.size(), " layer kinds for ", c.num_hidden_layers, " layers");
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  ojson kinds = ojson::array();
  for (bool full : c.full_attention) kinds.push_back(full ? "full_attention" : "linear_attention");
  j["layer_types"] = kinds;
  j["intermediate_size"] = c.intermediate_size;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["linear_conv_kernel_dim"] = c.linear_conv_kernel_dim;
  j["linear_key_head_dim"] = c.linear_key_head_dim;
  j["linear_num_key_heads"] = c.linear_num_key_heads;
  j["linear_num_value_heads"] = c.linear_num_value_heads;
  j["linear_value_head_dim"] = c.linear_value_head_dim;
  j["partial_rotary_factor"] = c.partial_rotary_factor;
  j["rope_parameters"]["partial_rotary_factor"] = c.partial_rotary_factor;
  j["rope_parameters"]["rope_theta"] = c.rope_theta;
  if (!c.mrope_section.empty()) j["rope_parameters"]["mrope_section"] = c.mrope_section;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

void write_text_encoder(const std::string& dir, const std::string& config_json, uint64_t seed, bool sync) {
  const fs::path root(dir);
  const qwen35::TextConfig cfg = qwen35::TextConfig::from_json_text(config_json, (root / "config.json").string());
  std::vector<SafetensorsSpec> specs;
  for (const auto& s : qwen35::text_tensor_specs(cfg)) specs.push_back({s.name, s.shape, DType::BF16});
  // One tensor in memory at a time: the release embedding alone is 2.5 GB.
  write_safetensors_streamed(
      (root / "model.safetensors").string(), specs,
      [&](size_t i) {
        const SafetensorsSpec& s = specs[i];
        const uint64_t key = fnv1a(s.name) ^ seed;
        const TextDraw d = text_draw(s.name, s.shape);
        return seeded_tensor(s.shape, DType::BF16, [&](uint64_t e) { return d(key, e); });
      },
      {{"format", "pt"}}, sync);
  write_file_atomic((root / "config.json").string(), config_json);
  write_file_atomic((root / "tokenizer.json").string(), tiny_tokenizer_json());
  write_file_atomic((root / "tokenizer_config.json").string(), tiny_tokenizer_config_json());
}

void write_tiny_text_encoder(const std::string& dir, uint64_t seed) {
  write_text_encoder(dir, tiny_text_config_json(), seed, true);
}

}  // namespace magi2
