// Prompt text handling before the Qwen3.5 text encoder: JSON "enhanced"
// prompts rendered to compact markdown, the I2VA `<Figure 1>` augmentation,
// the `<Figure 1>` token selection, and the default negative prompt.
// Sources: spec magi2-pipeline.md §2.4-2.7 and Appendix C; official
// inference/model/qwen35.py (normalisation, target token indices) and
// inference/pipeline/inference_engine.py (figure token, negative prompt).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "models/qwen35/tokenizer.h"

namespace magi2::qwen35 {

/// The default negative prompt of the unconditional CFG branch, verbatim
/// (spec §2.7 / Appendix C): 1 721 bytes of ASCII, one line, no trailing
/// newline, UTF-8 SHA-256 5ac0746d...cdcb9. Encoded like any prompt
/// (normalisation leaves it unchanged) and never figure-augmented.
std::string_view default_negative_prompt();

/// The figure token the I2VA path pools over, and the sentence carrying it.
inline constexpr std::string_view kFigureToken = "<Figure 1>";
inline constexpr std::string_view kFigureSentence = "The first frame refers to <Figure 1>";

/// How normalize_prompt treats a prompt that looks like a JSON object but
/// does not parse.
enum class JsonPromptPolicy {
  kOfficial,  ///< as the official code: use the text unchanged (silently)
  kStrict,    ///< Error naming the JSON parse failure (for user-facing tools)
};

/// The official prompt normalisation (`_normalize_prompt`, spec §2.4): if the
/// prompt parses as JSON (Python json.loads semantics) and is an object or
/// array, it goes through json_to_compact_markdown; anything else is returned
/// byte-for-byte. As in the official code, an object without "global_layer",
/// any array, and an object whose structure makes the official renderer raise
/// TypeError (a non-zero number or `true` where a list of timeline entries is
/// iterated) are returned unchanged.
/// Input/output: UTF-8. Errors: magi2::Error for invalid UTF-8; with kStrict
/// also for text whose first non-blank character is '{' but that is not valid
/// JSON (message carries the parser's position).
std::string normalize_prompt(std::string_view prompt, JsonPromptPolicy policy = JsonPromptPolicy::kOfficial);

/// The official `json_to_compact_markdown` on a JSON text (spec §2.4): strips
/// empty values, then emits the context / aesthetics / audio / subjects /
/// objects / timeline / reference lines, joined with "\n" (blank lines
/// dropped). Returns `raw_json` unchanged when the value is not an object with
/// "global_layer". Errors: magi2::Error for malformed JSON ("prompt JSON is
/// malformed: ...") and for the structures where the official code raises
/// TypeError.
std::string json_to_compact_markdown(std::string_view raw_json);

/// The official I2VA augmentation (`_ensure_figure_tokens`, spec §2.5): a
/// JSON-object prompt gets `"reference_layer": [kFigureSentence]` (replacing
/// any existing value, keeping its key position, else appended) and is
/// re-serialised like Python `json.dumps(ensure_ascii=False)`; any other
/// prompt gets "reference_layer:" + kFigureSentence appended with no separator
/// (upstream; vLLM-Omni inserts a "\n" first, spec §10.1). The figure ids are
/// irrelevant: the official code always writes `<Figure 1>`.
std::string ensure_figure_token(std::string_view prompt);

/// Token indices whose offsets overlap the first occurrence of `target` in
/// `normalized_prompt` (official `get_target_token_indices`, spec §2.6):
/// `max(a, s) < min(b, e)` in code points, skipping (0,0) offsets except at
/// index 0. Empty when `target` is absent or empty (the caller then uses a
/// zero special token). `offsets` are Encoding::offsets of that same text.
std::vector<int64_t> figure_token_indices(std::string_view normalized_prompt, const std::vector<CpRange>& offsets,
                                          std::string_view target = kFigureToken);

/// A prompt ready for the text encoder.
struct PreparedPrompt {
  std::string encoded;     ///< after the I2VA augmentation (= input when not I2VA)
  std::string normalized;  ///< text actually tokenised
  Encoding encoding;       ///< ids / offsets / truncation report of `normalized`
  std::vector<int64_t> figure_indices;  ///< I2VA only: tokens to pool (may be empty)
};

/// augmentation (when `i2v`) -> normalisation -> tokenisation -> figure token
/// indices: the official positive-prompt path. For the negative prompt pass
/// i2v = false. Errors: as normalize_prompt and Tokenizer::encode (an empty
/// prompt is an Error unless opt.allow_empty).
PreparedPrompt prepare_prompt(const Tokenizer& tok, std::string_view prompt, bool i2v,
                              const EncodeOptions& opt = {});

}  // namespace magi2::qwen35
