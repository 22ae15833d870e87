#include "models/qwen35/tok_pretokenize.h"

#include <algorithm>

#include "core/error.h"

namespace magi2::qwen35 {

const char* const kMagiCjkSplitPattern =
    R"(([\u1100-\u11ff\u2e80-\ua4cf\ua840-\uD7AF\uF900-\uFAFF\uFE30-\uFE4F\uFF65-\uFFDC\U00020000-\U0002FFFF]))";

namespace {

// GPT-2's pattern, used by a ByteLevel pre-tokenizer with use_regex = true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

SplitBehavior parse_behavior(const std::string& s, const std::string& what) {
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  throw Error(str_cat(what, ": unknown Split behavior '", s, "'"));
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& what) {
  MAGI2_CHECK(j.is_object() && j.contains(key), what, ": missing field '", key, "'");
  return j.at(key);
}

bool flag(const nlohmann::json& j, const char* key, bool dflt, const std::string& what) {
  if (!j.contains(key) || j.at(key).is_null()) return dflt;
  MAGI2_CHECK(j.at(key).is_boolean(), what, ": field '", key, "' must be a boolean");
  return j.at(key).get<bool>();
}

}  // namespace

char32_t byte_to_unicode(unsigned char b) {
  if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
  // The remaining bytes, in increasing order, take U+0100, U+0101, ...
  int rank = 0;
  if (b <= 0x20) {
    rank = b;  // 0x00..0x20 -> 0..32
  } else if (b <= 0xA0) {
    rank = 33 + (b - 0x7F);  // 0x7F..0xA0 -> 33..66
  } else {
    rank = 67;  // 0xAD
  }
  return 0x100 + rank;
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, const std::string& what) {
  PreTokenizer p;
  if (!j.is_null()) add_from_json(p.steps_, j, what);
  return p;
}

void PreTokenizer::add_from_json(std::vector<Step>& steps, const nlohmann::json& j, const std::string& what) {
  MAGI2_CHECK(j.is_object() && j.contains("type") && j.at("type").is_string(), what,
              ": pre_tokenizer entry without a string 'type'");
  const std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    const auto& list = field(j, "pretokenizers", what);
    MAGI2_CHECK(list.is_array(), what, ": Sequence 'pretokenizers' must be an array");
    for (const auto& sub : list) add_from_json(steps, sub, what);
    return;
  }
  if (type == "Split") {
    Step s;
    const auto& pat = field(j, "pattern", what);
    MAGI2_CHECK(pat.is_object() && pat.size() == 1, what, ": Split 'pattern' must be {\"Regex\": ..} or {\"String\": ..}");
    if (pat.contains("Regex") && pat.at("Regex").is_string()) {
      s.regex = std::make_shared<Regex>(pat.at("Regex").get<std::string>(), what + " Split pattern");
    } else if (pat.contains("String") && pat.at("String").is_string()) {
      s.literal = pat.at("String").get<std::string>();
    } else {
      throw Error(str_cat(what, ": Split 'pattern' must hold a string 'Regex' or 'String'"));
    }
    const auto& beh = field(j, "behavior", what);
    MAGI2_CHECK(beh.is_string(), what, ": Split 'behavior' must be a string");
    s.behavior = parse_behavior(beh.get<std::string>(), what);
    s.invert = flag(j, "invert", false, what);
    steps.push_back(std::move(s));
    return;
  }
  if (type == "ByteLevel") {
    // Inserting a prefix space would need a synthetic aligned character; no
    // Qwen tokenizer uses it.
    MAGI2_CHECK(!flag(j, "add_prefix_space", true, what), what,
                ": ByteLevel pre_tokenizer with add_prefix_space = true is not supported");
    if (flag(j, "use_regex", true, what)) {
      Step s;
      s.regex = std::make_shared<Regex>(kGpt2Pattern, what + " ByteLevel regex");
      steps.push_back(std::move(s));
    }
    return;
  }
  throw Error(str_cat(what, ": pre_tokenizer type '", type, "' is not supported"));
}

void PreTokenizer::prepend_split(std::string_view onig_pattern, SplitBehavior behavior, bool invert,
                                 const std::string& what) {
  Step s;
  s.regex = std::make_shared<Regex>(onig_pattern, what);
  s.behavior = behavior;
  s.invert = invert;
  steps_.insert(steps_.begin(), std::move(s));
}

void PreTokenizer::apply(const Step& s, std::string_view text, const ByteRange& piece,
                         std::vector<ByteRange>& out) {
  const std::string_view sub = text.substr(piece.first, piece.second - piece.first);
  // (range, is_match) covering the piece, as HF's Pattern::find_matches.
  std::vector<std::pair<ByteRange, bool>> m;
  std::vector<ByteRange> hits;
  if (s.regex) {
    hits = s.regex->find_all(sub);
  } else if (!s.literal.empty()) {
    for (size_t at = sub.find(s.literal); at != std::string_view::npos; at = sub.find(s.literal, at + s.literal.size()))
      hits.emplace_back(at, at + s.literal.size());
  }
  size_t prev = 0;
  for (const auto& h : hits) {
    if (h.first > prev) m.push_back({{prev, h.first}, false});
    m.push_back({h, true});
    prev = h.second;
  }
  if (prev < sub.size()) m.push_back({{prev, sub.size()}, false});
  if (s.invert)
    for (auto& x : m) x.second = !x.second;

  std::vector<std::pair<ByteRange, bool>> r;
  switch (s.behavior) {
    case SplitBehavior::kIsolated:
      r = m;
      break;
    case SplitBehavior::kRemoved:
      for (const auto& x : m)
        if (!x.second) r.push_back(x);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const auto& x : m) {
        if (x.second && !prev_match && !r.empty()) {
          r.back().first.second = x.first.second;
        } else {
          r.push_back(x);
        }
        prev_match = x.second;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (auto it = m.rbegin(); it != m.rend(); ++it) {
        if (it->second && !prev_match && !r.empty()) {
          r.back().first.first = it->first.first;
        } else {
          r.push_back(*it);
        }
        prev_match = it->second;
      }
      std::reverse(r.begin(), r.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (const auto& x : m) {
        if (x.second == prev_match && !r.empty()) {
          r.back().first.second = x.first.second;
        } else {
          r.push_back(x);
        }
        prev_match = x.second;
      }
      break;
    }
  }
  for (const auto& x : r)
    if (x.first.second > x.first.first)
      out.emplace_back(piece.first + x.first.first, piece.first + x.first.second);
}

std::vector<ByteRange> PreTokenizer::split(std::string_view text) const {
  std::vector<ByteRange> cur;
  if (!text.empty()) cur.emplace_back(0, text.size());
  std::vector<ByteRange> next;
  for (const Step& s : steps_) {
    next.clear();
    for (const auto& piece : cur) apply(s, text, piece, next);
    cur.swap(next);
  }
  return cur;
}

}  // namespace magi2::qwen35
