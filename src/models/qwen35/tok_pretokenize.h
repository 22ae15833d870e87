// Pre-tokenizers of HF tokenizer.json files (the subset byte-level BPE models
// such as Qwen3.5 use) and the MAGI CJK split the official text encoder puts
// in front of them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/qwen35/tok_regex.h"

namespace magi2::qwen35 {

/// Byte range [first, second) inside one normalised text segment.
using ByteRange = std::pair<size_t, size_t>;

/// What a Split does with the matched parts (HF `SplitDelimiterBehavior`).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

/// The MAGI CJK split pattern exactly as the official text encoder passes it
/// to `tokenizers` (spec §2.2; official inference/model/qwen35.py). Compiled
/// with Oniguruma semantics it isolates the listed BMP CJK ranges *and* the
/// ASCII range '0'-'U', and not U+20000-U+2FFFF (spec corrections, item 1).
extern const char* const kMagiCjkSplitPattern;

/// An ordered list of pre-tokenization steps. Each step refines the pieces of
/// the previous one; regexes see one piece at a time (so look-arounds stop at
/// piece boundaries, as in HF).
class PreTokenizer {
 public:
  /// Builds from the tokenizer.json "pre_tokenizer" value (null allowed).
  /// Supported: Sequence, Split (Regex or String pattern, all behaviours,
  /// invert), ByteLevel with add_prefix_space false (use_regex true applies
  /// the GPT-2 pattern). Errors: magi2::Error naming `what` and the type or
  /// field that is missing, malformed or unsupported.
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& what);

  /// Puts a regex Split in front of the existing steps (how the official
  /// encoder adds the CJK split). Errors as Regex.
  void prepend_split(std::string_view onig_pattern, SplitBehavior behavior, bool invert,
                     const std::string& what);

  /// Splits a normalised segment (valid UTF-8) into pieces, in order; empty
  /// pieces are dropped. Byte-level mapping is not applied here (the BPE model
  /// maps bytes itself), so a ByteLevel step only contributes its optional
  /// regex split.
  std::vector<ByteRange> split(std::string_view text) const;

  /// Number of splitting steps (a ByteLevel step without regex adds none).
  size_t num_steps() const { return steps_.size(); }

 private:
  struct Step {
    std::shared_ptr<const Regex> regex;  // null for a literal pattern
    std::string literal;
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
  };
  static void add_from_json(std::vector<Step>& steps, const nlohmann::json& j, const std::string& what);
  static void apply(const Step& s, std::string_view text, const ByteRange& piece, std::vector<ByteRange>& out);

  std::vector<Step> steps_;
};

/// The GPT-2 byte-to-unicode table: byte b is shown as code point
/// byte_to_unicode(b) in byte-level BPE vocabularies ('!'..'~', U+00A1..U+00AC,
/// U+00AE..U+00FF map to themselves, the other 68 bytes to U+0100.. in order).
char32_t byte_to_unicode(unsigned char b);

}  // namespace magi2::qwen35
