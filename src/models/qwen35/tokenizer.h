// The Qwen3.5 byte-level BPE tokenizer as the official MAGI-2 text encoder
// uses it: HF tokenizer.json semantics (added/special tokens, NFC normalizer,
// Split + ByteLevel pre-tokenizer, BPE with merge ranks, ByteLevel
// post-processor) with the MAGI CJK split put in front of the pre-tokenizer,
// truncation at 7000 tokens, and character offsets per token.
// Sources: spec magi2-pipeline.md §2.2 (+ correction 1); official
// inference/model/qwen35.py (Qwen35TextEncoder); shared/golden
// qwen35_text_tiny (ids and offsets of every golden prompt).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/qwen35/tok_bpe.h"
#include "models/qwen35/tok_pretokenize.h"
#include "models/qwen35/tok_unicode.h"

namespace magi2::qwen35 {

/// `max_length` of the official Qwen35TextEncoder tokenizer call, in tokens.
constexpr int64_t kOfficialMaxLength = 7000;

/// Options of one encode call. The defaults are the official call
/// (`truncation=True, max_length=7000`, default `add_special_tokens`, one
/// prompt so "longest" padding adds nothing).
struct EncodeOptions {
  int64_t max_length = kOfficialMaxLength;  ///< tokens kept at most (when truncation)
  bool truncation = true;                   ///< drop tokens beyond max_length (right side)
  bool add_special_tokens = true;           ///< apply the post-processor's template tokens
  /// The official encoder crashes on an empty prompt (spec correction 2), so
  /// by default an empty input is an Error; true returns an empty Encoding.
  bool allow_empty = false;
};

/// Result of encoding one text.
struct Encoding {
  std::vector<int64_t> ids;        ///< token ids
  std::vector<CpRange> offsets;    ///< per token: [start, end) in code points of the input
                                   ///< text ((0,0) for post-processor tokens); a byte-level token
                                   ///< holding part of a character spans that whole character
  std::vector<int64_t> attention_mask;  ///< all ones (no padding for one prompt)
  int64_t untruncated_length = 0;  ///< tokens before truncation
  int64_t num_truncated = 0;       ///< tokens removed by truncation (0 = not truncated)
  int64_t num_dropped_bytes = 0;   ///< input bytes with no vocabulary symbol (HF drops them)

  bool truncated() const { return num_truncated > 0; }
  size_t size() const { return ids.size(); }
};

/// One added token of tokenizer.json ("added_tokens").
struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  ///< matched after normalisation (else on the raw text)
  bool special = false;
};

/// A loaded tokenizer. Immutable after loading except for the internal BPE
/// cache; encode() may be called concurrently.
class Tokenizer {
 public:
  /// Loads `<dir>/tokenizer.json` and, when present, `<dir>/tokenizer_config.json`
  /// (the official code loads the folder with AutoTokenizer; from the config
  /// only `added_tokens_decoder` entries missing from tokenizer.json and
  /// `split_special_tokens` matter for encoding). With `magi_cjk_split` the
  /// official CJK split is prepended to the pre-tokenizer (what
  /// Qwen35TextEncoder does); false gives the plain HF tokenizer.
  /// Errors: magi2::Error naming the file for missing/unreadable files,
  /// malformed JSON, and missing, malformed or unsupported components.
  static std::shared_ptr<const Tokenizer> load(const std::string& dir, bool magi_cjk_split = true);

  /// Same from JSON texts (config may be empty = absent); `what` names the
  /// source in error messages.
  static std::shared_ptr<const Tokenizer> from_json_text(std::string_view tokenizer_json,
                                                         std::string_view config_json, bool magi_cjk_split,
                                                         const std::string& what);

  /// Tokenises `text` (UTF-8; the *normalised* prompt, see prompt.h).
  /// Errors: magi2::Error for invalid UTF-8 ("tokenizer input is not valid
  /// UTF-8 ... byte N"), an empty text or a text that yields no token unless
  /// allow_empty, a max_length not above the post-processor's added tokens,
  /// and NFC needing ICU when it is unavailable (tok_unicode.h).
  Encoding encode(std::string_view text, const EncodeOptions& opt = {}) const;

  /// Concatenated text of `ids` (byte-level decoding; invalid UTF-8 becomes
  /// U+FFFD). Errors: magi2::Error for an id outside the vocabulary.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

  /// Id of a token (vocabulary in byte-level form, or an added token), or -1.
  int64_t token_to_id(std::string_view token) const;
  /// Token string of an id ("" if unknown).
  std::string id_to_token(int64_t id) const;
  /// Largest id + 1 over the vocabulary and the added tokens.
  int64_t id_bound() const;
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  /// Tokens the post-processor adds to one sequence.
  int64_t num_special_tokens_to_add() const;

 private:
  struct PostStep {
    bool byte_level = false;      // ByteLevel: offsets trimming only
    bool trim_offsets = false;
    std::vector<int64_t> template_ids;  // TemplateProcessing: -1 marks the sequence
  };
  struct Match {
    size_t begin, end;  // code-point range
    int64_t token;      // added-token id, or -1 for text
  };

  Tokenizer() = default;
  void parse(std::string_view tokenizer_json, std::string_view config_json, bool magi_cjk_split,
             const std::string& what);
  std::vector<Match> split_added(std::u32string_view text, bool normalized_set) const;
  void encode_segment(std::u32string_view seg, const std::vector<CpRange>& align, Encoding& enc) const;
  void post_process(Encoding& enc, bool add_special) const;

  bool nfc_ = false;
  PreTokenizer pre_;
  BpeModel bpe_;
  std::vector<AddedToken> added_;
  std::vector<std::u32string> added_match_;  // content to search for (normalised if `normalized`)
  bool split_special_tokens_ = false;
  std::vector<PostStep> post_;
};

}  // namespace magi2::qwen35
