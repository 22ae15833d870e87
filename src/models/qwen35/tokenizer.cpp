#include "models/qwen35/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_depth.h"
#include "io/mmap_file.h"

namespace magi2::qwen35 {

namespace {

using json = nlohmann::json;

json parse_json(std::string_view text, const std::string& what) {
  check_json_depth(text, what);
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw Error(str_cat(what, ": malformed JSON: ", e.what()));
  }
}

bool opt_bool(const json& j, const char* key, bool dflt, const std::string& what) {
  if (!j.contains(key) || j.at(key).is_null()) return dflt;
  MAGI2_CHECK(j.at(key).is_boolean(), what, ": field '", key, "' must be a boolean");
  return j.at(key).get<bool>();
}

// Rust's char::is_whitespace (White_Space property); used where HF strips
// around added tokens (lstrip / rstrip).
bool rust_isspace(char32_t c) { return py_isspace(c) && !(c >= 0x1C && c <= 0x1F); }

// Approximation of "alphanumeric or '_'" for single_word added tokens (no
// Qwen token uses single_word).
bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return !rust_isspace(c) && py_isprintable(c);
}

// True when the normalizer is NFC (possibly inside a Sequence); other kinds
// are not implemented.
bool parse_normalizer(const json& j, const std::string& what) {
  if (j.is_null()) return false;
  MAGI2_CHECK(j.is_object() && j.contains("type") && j.at("type").is_string(), what,
              ": normalizer without a string 'type'");
  const std::string type = j.at("type").get<std::string>();
  if (type == "NFC") return true;
  if (type == "Sequence") {
    MAGI2_CHECK(j.contains("normalizers") && j.at("normalizers").is_array(), what,
                ": Sequence normalizer needs a 'normalizers' array");
    bool nfc = false;
    for (const auto& sub : j.at("normalizers")) {
      MAGI2_CHECK(!nfc, what, ": only a single NFC normalizer is supported");
      nfc = parse_normalizer(sub, what);
    }
    return nfc;
  }
  throw Error(str_cat(what, ": normalizer type '", type, "' is not supported (only NFC)"));
}

AddedToken parse_added(const json& t, int64_t id, const std::string& what) {
  MAGI2_CHECK(t.is_object() && t.contains("content") && t.at("content").is_string(), what,
              ": added token ", id, " has no string 'content'");
  AddedToken a;
  a.id = id;
  a.content = t.at("content").get<std::string>();
  MAGI2_CHECK(!a.content.empty(), what, ": added token ", id, " has empty content");
  a.single_word = opt_bool(t, "single_word", false, what);
  a.lstrip = opt_bool(t, "lstrip", false, what);
  a.rstrip = opt_bool(t, "rstrip", false, what);
  a.special = opt_bool(t, "special", false, what);
  a.normalized = opt_bool(t, "normalized", !a.special, what);
  return a;
}

}  // namespace

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::string& dir, bool magi_cjk_split) {
  const std::string tj = (std::filesystem::path(dir) / "tokenizer.json").string();
  const std::string cj = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  const std::string tok = read_text_file(tj);
  std::string cfg;
  if (std::filesystem::exists(cj)) cfg = read_text_file(cj);
  return from_json_text(tok, cfg, magi_cjk_split, tj);
}

std::shared_ptr<const Tokenizer> Tokenizer::from_json_text(std::string_view tokenizer_json,
                                                           std::string_view config_json, bool magi_cjk_split,
                                                           const std::string& what) {
  // Any JSON type mismatch below (a number where a string is due, ...)
  // becomes one Error naming the source, like every other bad value.
  try {
    auto t = std::shared_ptr<Tokenizer>(new Tokenizer());
    t->parse(tokenizer_json, config_json, magi_cjk_split, what);
    return t;
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat(what, ": ", e.what()));
  }
}

void Tokenizer::parse(std::string_view tokenizer_json, std::string_view config_json, bool magi_cjk_split,
                      const std::string& what) {
  const json j = parse_json(tokenizer_json, what);
  MAGI2_CHECK(j.is_object(), what, ": top level must be a JSON object");
  MAGI2_CHECK(j.contains("model"), what, ": missing 'model'");
  bpe_ = BpeModel::from_json(j.at("model"), what);
  nfc_ = parse_normalizer(j.value("normalizer", json()), what);
  pre_ = PreTokenizer::from_json(j.value("pre_tokenizer", json()), what);
  if (magi_cjk_split) {
    pre_.prepend_split(kMagiCjkSplitPattern, SplitBehavior::kIsolated, false, what + " (MAGI CJK split)");
  }

  if (j.contains("added_tokens") && !j.at("added_tokens").is_null()) {
    MAGI2_CHECK(j.at("added_tokens").is_array(), what, ": 'added_tokens' must be an array");
    for (const auto& t : j.at("added_tokens")) {
      MAGI2_CHECK(t.is_object() && t.contains("id") && t.at("id").is_number_integer(), what,
                  ": added token without an integer 'id'");
      added_.push_back(parse_added(t, t.at("id").get<int64_t>(), what));
    }
  }
  if (!config_json.empty()) {
    const std::string cwhat = what + " (tokenizer_config.json)";
    const json c = parse_json(config_json, cwhat);
    MAGI2_CHECK(c.is_object(), cwhat, ": top level must be a JSON object");
    split_special_tokens_ = opt_bool(c, "split_special_tokens", false, cwhat);
    if (c.contains("added_tokens_decoder") && c.at("added_tokens_decoder").is_object()) {
      for (const auto& [key, t] : c.at("added_tokens_decoder").items()) {
        int64_t id = -1;
        try {
          size_t used = 0;
          id = std::stoll(key, &used);
          MAGI2_CHECK(used == key.size(), "");
        } catch (...) {
          throw Error(str_cat(cwhat, ": added_tokens_decoder key '", key, "' is not an integer id"));
        }
        const bool known = std::any_of(added_.begin(), added_.end(), [&](const AddedToken& a) { return a.id == id; });
        if (!known) added_.push_back(parse_added(t, id, cwhat));
      }
    }
  }
  for (const AddedToken& a : added_) {
    std::u32string c = utf8_decode(a.content, what + " added token content");
    if (a.normalized && nfc_) c = nfc_with_alignment(c, 0).text;
    added_match_.push_back(std::move(c));
  }

  post_.clear();
  const json pp = j.value("post_processor", json());
  std::vector<const json*> stack;
  if (!pp.is_null()) stack.push_back(&pp);
  std::vector<const json*> flat;
  while (!stack.empty()) {
    const json* p = stack.back();
    stack.pop_back();
    MAGI2_CHECK(p->is_object() && p->contains("type") && p->at("type").is_string(), what,
                ": post_processor without a string 'type'");
    if (p->at("type") == "Sequence") {
      MAGI2_CHECK(p->contains("processors") && p->at("processors").is_array(), what,
                  ": Sequence post_processor needs 'processors'");
      const auto& list = p->at("processors");
      for (auto it = list.rbegin(); it != list.rend(); ++it) stack.push_back(&*it);
    } else {
      flat.push_back(p);
    }
  }
  for (const json* p : flat) {
    const std::string type = p->at("type").get<std::string>();
    PostStep s;
    if (type == "ByteLevel") {
      s.byte_level = true;
      s.trim_offsets = opt_bool(*p, "trim_offsets", true, what);
    } else if (type == "TemplateProcessing") {
      MAGI2_CHECK(p->contains("single") && p->at("single").is_array(), what,
                  ": TemplateProcessing needs a 'single' array");
      const json specials = p->value("special_tokens", json::object());
      for (const auto& piece : p->at("single")) {
        if (piece.contains("Sequence")) {
          s.template_ids.push_back(-1);
        } else if (piece.contains("SpecialToken")) {
          const std::string name = piece.at("SpecialToken").value("id", std::string());
          MAGI2_CHECK(specials.contains(name) && specials.at(name).contains("ids") &&
                          specials.at(name).at("ids").is_array(),
                      what, ": TemplateProcessing special token '", name, "' has no ids");
          for (const auto& id : specials.at(name).at("ids")) s.template_ids.push_back(id.get<int64_t>());
        } else {
          throw Error(str_cat(what, ": malformed TemplateProcessing piece ", piece.dump()));
        }
      }
    } else {
      throw Error(str_cat(what, ": post_processor type '", type, "' is not supported"));
    }
    post_.push_back(std::move(s));
  }
}

int64_t Tokenizer::num_special_tokens_to_add() const {
  int64_t n = 0;
  for (const PostStep& s : post_)
    for (int64_t id : s.template_ids)
      if (id >= 0) ++n;
  return n;
}

std::vector<Tokenizer::Match> Tokenizer::split_added(std::u32string_view text, bool normalized_set) const {
  // Leftmost-longest, non-overlapping occurrences (HF uses Aho-Corasick with
  // MatchKind::LeftmostLongest), then the single_word / lstrip / rstrip rules.
  std::vector<Match> found;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best_len = 0;
    int64_t best = -1;
    size_t at = pos;
    for (; at < text.size() && best < 0; ++at) {
      for (size_t k = 0; k < added_.size(); ++k) {
        const AddedToken& a = added_[k];
        if (a.normalized != normalized_set) continue;
        if (a.special && split_special_tokens_) continue;
        const std::u32string& c = added_match_[k];
        if (c.size() > best_len && text.substr(at, c.size()) == c) {
          best_len = c.size();
          best = static_cast<int64_t>(k);
        }
      }
      if (best >= 0) break;
    }
    if (best < 0) break;
    found.push_back({at, at + best_len, best});
    pos = at + best_len;
  }

  std::vector<Match> out;
  size_t start_offset = 0;
  for (const Match& m : found) {
    const AddedToken& a = added_[m.token];
    size_t start = m.begin, stop = m.end;
    if (a.single_word) {
      const bool start_ok = start == 0 || !is_word_char(text[start - 1]);
      const bool stop_ok = stop == text.size() || !is_word_char(text[stop]);
      if (!start_ok || !stop_ok) continue;
    }
    if (a.lstrip) {
      size_t s = start;
      while (s > 0 && rust_isspace(text[s - 1])) --s;
      start = std::max(s, start_offset);
    }
    if (a.rstrip) {
      while (stop < text.size() && rust_isspace(text[stop])) ++stop;
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, a.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
  return out;
}

void Tokenizer::encode_segment(std::u32string_view seg, const std::vector<CpRange>& align, Encoding& enc) const {
  // UTF-8 of the segment with, per byte, the original range of its character.
  std::string bytes;
  std::vector<CpRange> byte_align;
  bytes.reserve(seg.size() * 2);
  byte_align.reserve(seg.size() * 2);
  for (size_t i = 0; i < seg.size(); ++i) {
    const size_t before = bytes.size();
    utf8_append(bytes, seg[i]);
    byte_align.insert(byte_align.end(), bytes.size() - before, align[i]);
  }
  std::vector<BpeToken> toks;
  for (const ByteRange& piece : pre_.split(bytes)) {
    toks.clear();
    bpe_.tokenize(std::string_view(bytes).substr(piece.first, piece.second - piece.first), toks,
                  &enc.num_dropped_bytes);
    for (const BpeToken& t : toks) {
      enc.ids.push_back(t.id);
      enc.offsets.emplace_back(byte_align[piece.first + t.begin].first, byte_align[piece.first + t.end - 1].second);
    }
  }
}

void Tokenizer::post_process(Encoding& enc, bool add_special) const {
  for (const PostStep& s : post_) {
    if (s.byte_level) {
      if (!s.trim_offsets) continue;
      // Offsets exclude leading / trailing (byte-level) spaces of a token.
      for (size_t i = 0; i < enc.ids.size(); ++i) {
        const std::u32string tok = utf8_decode(bpe_.id_to_token(enc.ids[i]), "token");
        auto sp = [](char32_t c) { return c == 0x120 || rust_isspace(c); };
        int64_t lead = 0, trail = 0;
        while (lead < static_cast<int64_t>(tok.size()) && sp(tok[lead])) ++lead;
        while (trail < static_cast<int64_t>(tok.size()) && sp(tok[tok.size() - 1 - trail])) ++trail;
        CpRange& o = enc.offsets[i];
        if (lead > 0) o.first = std::min(o.first + lead, o.second);
        if (trail > 0 && o.second >= trail) o.second = std::max(o.second - trail, o.first);
      }
      continue;
    }
    if (!add_special || s.template_ids.empty()) continue;
    std::vector<int64_t> ids;
    std::vector<CpRange> offs;
    for (int64_t id : s.template_ids) {
      if (id < 0) {
        ids.insert(ids.end(), enc.ids.begin(), enc.ids.end());
        offs.insert(offs.end(), enc.offsets.begin(), enc.offsets.end());
      } else {
        ids.push_back(id);
        offs.emplace_back(0, 0);
      }
    }
    enc.ids.swap(ids);
    enc.offsets.swap(offs);
  }
}

Encoding Tokenizer::encode(std::string_view text, const EncodeOptions& opt) const {
  const std::u32string cps = utf8_decode(text, "tokenizer input");
  MAGI2_CHECK(!cps.empty() || opt.allow_empty,
              "empty prompt: the official Qwen3.5 text encoder cannot encode an empty prompt "
              "(it fails inside the Gated DeltaNet); give a non-empty prompt");
  Encoding enc;
  for (const Match& raw : split_added(cps, false)) {
    if (raw.token >= 0) {
      enc.ids.push_back(raw.token);
      enc.offsets.emplace_back(raw.begin, raw.end);
      continue;
    }
    const std::u32string_view piece = std::u32string_view(cps).substr(raw.begin, raw.end - raw.begin);
    NfcResult n;
    if (nfc_) {
      n = nfc_with_alignment(piece, static_cast<int64_t>(raw.begin));
    } else {
      n.text.assign(piece.begin(), piece.end());
      for (size_t i = 0; i < piece.size(); ++i) n.align.emplace_back(raw.begin + i, raw.begin + i + 1);
    }
    for (const Match& m : split_added(n.text, true)) {
      if (m.token >= 0) {
        enc.ids.push_back(m.token);
        enc.offsets.emplace_back(n.align[m.begin].first, n.align[m.end - 1].second);
        continue;
      }
      const std::vector<CpRange> sub(n.align.begin() + m.begin, n.align.begin() + m.end);
      encode_segment(std::u32string_view(n.text).substr(m.begin, m.end - m.begin), sub, enc);
    }
  }
  enc.untruncated_length = static_cast<int64_t>(enc.ids.size());
  MAGI2_CHECK(!enc.ids.empty() || opt.allow_empty, "prompt of ", text.size(),
              " bytes produced no tokens (no character is in the tokenizer vocabulary)");

  if (opt.truncation) {
    const int64_t added = opt.add_special_tokens ? num_special_tokens_to_add() : 0;
    MAGI2_CHECK(opt.max_length > added, "tokenizer max_length ", opt.max_length,
                " leaves no room for text (the post-processor adds ", added, " tokens)");
    const int64_t keep = opt.max_length - added;
    if (static_cast<int64_t>(enc.ids.size()) > keep) {
      enc.num_truncated = static_cast<int64_t>(enc.ids.size()) - keep;
      enc.ids.resize(keep);
      enc.offsets.resize(keep);
    }
  }
  post_process(enc, opt.add_special_tokens);
  enc.attention_mask.assign(enc.ids.size(), 1);
  return enc;
}

int64_t Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  return bpe_.token_to_id(token);
}

std::string Tokenizer::id_to_token(int64_t id) const {
  for (const AddedToken& a : added_)
    if (a.id == id) return a.content;
  return bpe_.id_to_token(id);
}

int64_t Tokenizer::id_bound() const {
  int64_t n = bpe_.id_bound();
  for (const AddedToken& a : added_) n = std::max(n, a.id + 1);
  return n;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  // Inverse byte-level map, built once.
  static const std::vector<int> inv = [] {
    std::vector<int> v(0x200, -1);
    for (int b = 0; b < 256; ++b) v[byte_to_unicode(static_cast<unsigned char>(b))] = b;
    return v;
  }();
  std::string bytes;
  for (int64_t id : ids) {
    const AddedToken* added = nullptr;
    for (const AddedToken& a : added_)
      if (a.id == id) added = &a;
    if (added != nullptr) {
      if (!(skip_special_tokens && added->special)) bytes += added->content;
      continue;
    }
    const std::string& tok = bpe_.id_to_token(id);
    MAGI2_CHECK(!tok.empty(), "decode: token id ", id, " is not in the vocabulary");
    for (char32_t c : utf8_decode(tok, "vocabulary token")) {
      if (c < inv.size() && inv[c] >= 0) {
        bytes.push_back(static_cast<char>(inv[c]));
      } else {
        utf8_append(bytes, c);
      }
    }
  }
  // Replace invalid UTF-8 by U+FFFD, one replacement per bad byte.
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    size_t len = 1;
    const auto b0 = static_cast<unsigned char>(bytes[i]);
    if (b0 >= 0xC0) len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
    bool ok = b0 < 0x80 || (b0 >= 0xC2 && b0 <= 0xF4 && i + len <= bytes.size());
    if (ok && len > 1) {
      try {
        utf8_decode(std::string_view(bytes).substr(i, len), "");
      } catch (const Error&) {
        ok = false;
      }
    }
    if (ok) {
      out.append(bytes, i, len);
      i += len;
    } else {
      utf8_append(out, 0xFFFD);
      ++i;
    }
  }
  return out;
}

}  // namespace magi2::qwen35
