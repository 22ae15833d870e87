// Byte-level BPE model of an HF tokenizer.json ("model": {"type": "BPE"}).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace magi2::qwen35 {

/// One BPE output token: vocabulary id and the byte range [begin, end) it
/// covers inside the pre-token that was tokenised.
struct BpeToken {
  int64_t id = 0;
  size_t begin = 0;
  size_t end = 0;
};

/// BPE with merge ranks, applied to one pre-token at a time after the GPT-2
/// byte-to-unicode mapping (every input byte becomes one initial symbol).
/// Merge order follows HF `tokenizers` (`Word::merge_all`): repeatedly the
/// pair with the lowest merge rank, leftmost first among equal ranks.
/// Results are cached per pre-token (thread-safe).
class BpeModel {
 public:
  /// Builds from the tokenizer.json "model" object. Accepts merges as
  /// "a b" strings or [a, b] pairs; a later duplicate merge overrides an
  /// earlier one (as HF). Supported options: unk_token, fuse_unk,
  /// byte_fallback, ignore_merges; dropout must be null/0 and
  /// continuing_subword_prefix / end_of_word_suffix null/empty.
  /// Errors: magi2::Error naming `what` and the offending field or merge
  /// (e.g. a merge whose parts or result are not in the vocabulary).
  static BpeModel from_json(const nlohmann::json& model, const std::string& what);

  /// An empty model (no vocabulary); filled by from_json.
  BpeModel() = default;
  /// Moves vocabulary and merges; the word cache starts empty.
  BpeModel(BpeModel&& o) noexcept;
  BpeModel& operator=(BpeModel&& o) noexcept;

  /// Tokenises the raw bytes of one pre-token; appends to `out`. Bytes whose
  /// symbol is not in the vocabulary become unk / byte-fallback tokens when
  /// configured and are otherwise dropped (HF behaviour); the number of
  /// dropped symbols is added to *dropped.
  void tokenize(std::string_view bytes, std::vector<BpeToken>& out, int64_t* dropped) const;

  /// Vocabulary id of a token string (byte-level form), or -1.
  int64_t token_to_id(std::string_view token) const;
  /// Token string of an id, or "" when the id is not in the vocabulary.
  const std::string& id_to_token(int64_t id) const;
  /// Number of vocabulary entries (not counting added tokens).
  size_t vocab_size() const { return vocab_.size(); }
  /// Largest vocabulary id + 1.
  int64_t id_bound() const { return static_cast<int64_t>(id_to_token_.size()); }

 private:
  struct Sym {
    int64_t id;
    size_t begin, end;
  };
  void merge_word(const std::string& bytes, std::vector<Sym>& syms) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> id_to_token_;
  // (left id, right id) -> (rank, merged id); key = left * 2^32 + right.
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> merges_;
  std::string byte_symbol_[256];  // UTF-8 of byte_to_unicode(b)
  int64_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<Sym>> cache_;
};

}  // namespace magi2::qwen35
