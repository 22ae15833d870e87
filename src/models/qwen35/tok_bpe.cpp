#include "models/qwen35/tok_bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "core/error.h"
#include "models/qwen35/tok_pretokenize.h"
#include "models/qwen35/tok_unicode.h"

namespace magi2::qwen35 {

namespace {

// HF caps its word cache too; a bound keeps memory flat for long prompts.
constexpr size_t kCacheCapacity = 10000;

uint64_t pair_key(int64_t a, int64_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b); }

std::string str_field(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return {};
  return j.at(key).is_string() ? j.at(key).get<std::string>() : std::string("\x01<non-string>");
}

}  // namespace

BpeModel::BpeModel(BpeModel&& o) noexcept { *this = std::move(o); }

BpeModel& BpeModel::operator=(BpeModel&& o) noexcept {
  if (this != &o) {
    vocab_ = std::move(o.vocab_);
    id_to_token_ = std::move(o.id_to_token_);
    merges_ = std::move(o.merges_);
    for (int i = 0; i < 256; ++i) byte_symbol_[i] = std::move(o.byte_symbol_[i]);
    unk_id_ = o.unk_id_;
    fuse_unk_ = o.fuse_unk_;
    byte_fallback_ = o.byte_fallback_;
    ignore_merges_ = o.ignore_merges_;
    cache_.clear();
  }
  return *this;
}

BpeModel BpeModel::from_json(const nlohmann::json& m, const std::string& what) {
  MAGI2_CHECK(m.is_object(), what, ": 'model' must be an object");
  MAGI2_CHECK(m.contains("type") && m.at("type") == "BPE", what, ": model type must be \"BPE\", got ",
              m.contains("type") ? m.at("type").dump() : std::string("nothing"));
  BpeModel b;
  if (m.contains("dropout") && !m.at("dropout").is_null()) {
    MAGI2_CHECK(m.at("dropout").is_number() && m.at("dropout").get<double>() == 0.0, what,
                ": BPE dropout is not supported (must be null)");
  }
  MAGI2_CHECK(str_field(m, "continuing_subword_prefix").empty(), what,
              ": BPE continuing_subword_prefix is not supported");
  MAGI2_CHECK(str_field(m, "end_of_word_suffix").empty(), what, ": BPE end_of_word_suffix is not supported");
  auto opt_bool = [&](const char* key) {
    if (!m.contains(key) || m.at(key).is_null()) return false;
    MAGI2_CHECK(m.at(key).is_boolean(), what, ": BPE field '", key, "' must be a boolean");
    return m.at(key).get<bool>();
  };
  b.fuse_unk_ = opt_bool("fuse_unk");
  b.byte_fallback_ = opt_bool("byte_fallback");
  b.ignore_merges_ = opt_bool("ignore_merges");

  MAGI2_CHECK(m.contains("vocab") && m.at("vocab").is_object(), what, ": BPE 'vocab' must be an object");
  const auto& vocab = m.at("vocab");
  b.vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    MAGI2_CHECK(it.value().is_number_integer() && it.value().get<int64_t>() >= 0 &&
                    it.value().get<int64_t>() < (int64_t{1} << 31),
                what, ": vocab entry '", it.key(), "' has no valid id");
    const int64_t id = it.value().get<int64_t>();
    b.vocab_[it.key()] = id;
    if (static_cast<int64_t>(b.id_to_token_.size()) <= id) b.id_to_token_.resize(id + 1);
    b.id_to_token_[id] = it.key();
  }
  const std::string unk = str_field(m, "unk_token");
  if (!unk.empty()) {
    auto it = b.vocab_.find(unk);
    MAGI2_CHECK(it != b.vocab_.end(), what, ": BPE unk_token '", unk, "' is not in the vocabulary");
    b.unk_id_ = it->second;
  }

  MAGI2_CHECK(m.contains("merges") && m.at("merges").is_array(), what, ": BPE 'merges' must be an array");
  const auto& merges = m.at("merges");
  b.merges_.reserve(merges.size());
  int64_t rank = 0;
  for (const auto& e : merges) {
    std::string l, r;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      MAGI2_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, what, ": merge ", rank,
                  " '", s, "' is not two space-separated symbols");
      l = s.substr(0, sp);
      r = s.substr(sp + 1);
    } else {
      MAGI2_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), what, ": merge ", rank,
                  " must be \"a b\" or [\"a\", \"b\"]");
      l = e[0].get<std::string>();
      r = e[1].get<std::string>();
    }
    auto il = b.vocab_.find(l), ir = b.vocab_.find(r), io = b.vocab_.find(l + r);
    MAGI2_CHECK(il != b.vocab_.end() && ir != b.vocab_.end(), what, ": merge ", rank, " ('", l, "', '", r,
                "') uses a symbol that is not in the vocabulary");
    MAGI2_CHECK(io != b.vocab_.end(), what, ": merge ", rank, " result '", l + r, "' is not in the vocabulary");
    b.merges_[pair_key(il->second, ir->second)] = {rank, io->second};
    ++rank;
  }
  for (int i = 0; i < 256; ++i) {
    b.byte_symbol_[i].clear();
    utf8_append(b.byte_symbol_[i], byte_to_unicode(static_cast<unsigned char>(i)));
  }
  return b;
}

int64_t BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

const std::string& BpeModel::id_to_token(int64_t id) const {
  static const std::string empty;
  if (id < 0 || id >= static_cast<int64_t>(id_to_token_.size())) return empty;
  return id_to_token_[id];
}

void BpeModel::merge_word(const std::string& bytes, std::vector<Sym>& syms) const {
  // Initial symbols: one per byte (each byte is one byte-level character).
  struct Node {
    int64_t id;
    size_t begin, end;
    int64_t prev, next;
  };
  std::vector<Node> nodes;
  nodes.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    const std::string& sym = byte_symbol_[static_cast<unsigned char>(bytes[i])];
    auto it = vocab_.find(sym);
    int64_t id = -1;
    if (it != vocab_.end()) {
      id = it->second;
    } else if (byte_fallback_) {
      // Fallback covers the UTF-8 bytes of the (byte-level) symbol; with a
      // byte-level vocabulary this only happens for incomplete vocabularies.
      bool all = true;
      std::vector<int64_t> ids;
      for (unsigned char c : sym) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "<0x%02X>", c);
        auto h = vocab_.find(hex);
        if (h == vocab_.end()) {
          all = false;
          break;
        }
        ids.push_back(h->second);
      }
      if (all) {
        for (int64_t x : ids) nodes.push_back({x, i, i + 1, -1, -1});
        continue;
      }
    }
    if (id < 0 && unk_id_ >= 0) {
      if (fuse_unk_ && !nodes.empty() && nodes.back().id == unk_id_ && nodes.back().end == i) {
        nodes.back().end = i + 1;
        continue;
      }
      id = unk_id_;
    }
    if (id < 0) continue;  // dropped, like HF without unk/byte fallback
    nodes.push_back({id, i, i + 1, -1, -1});
  }
  for (size_t k = 0; k < nodes.size(); ++k) {
    nodes[k].prev = static_cast<int64_t>(k) - 1;
    nodes[k].next = k + 1 < nodes.size() ? static_cast<int64_t>(k) + 1 : -1;
  }

  struct Cand {
    int64_t rank, pos, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  auto push_pair = [&](int64_t pos) {
    if (pos < 0 || nodes[pos].next < 0) return;
    auto it = merges_.find(pair_key(nodes[pos].id, nodes[nodes[pos].next].id));
    if (it != merges_.end()) q.push({it->second.first, pos, it->second.second});
  };
  for (size_t k = 0; k + 1 < nodes.size(); ++k) push_pair(static_cast<int64_t>(k));
  std::vector<bool> dead(nodes.size(), false);
  while (!q.empty()) {
    const Cand c = q.top();
    q.pop();
    if (dead[c.pos] || nodes[c.pos].next < 0) continue;
    const int64_t right = nodes[c.pos].next;
    auto it = merges_.find(pair_key(nodes[c.pos].id, nodes[right].id));
    if (it == merges_.end() || it->second.second != c.new_id) continue;  // stale candidate
    nodes[c.pos].id = c.new_id;
    nodes[c.pos].end = nodes[right].end;
    nodes[c.pos].next = nodes[right].next;
    if (nodes[right].next >= 0) nodes[nodes[right].next].prev = c.pos;
    dead[right] = true;
    push_pair(nodes[c.pos].prev);
    push_pair(c.pos);
  }
  syms.clear();
  for (size_t k = 0; k < nodes.size(); ++k)
    if (!dead[k]) syms.push_back({nodes[k].id, nodes[k].begin, nodes[k].end});
}

void BpeModel::tokenize(std::string_view bytes, std::vector<BpeToken>& out, int64_t* dropped) const {
  if (bytes.empty()) return;
  std::string key(bytes);
  std::vector<Sym> syms;
  bool hit = false;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      syms = it->second;
      hit = true;
    }
  }
  if (!hit) {
    bool whole = false;
    if (ignore_merges_) {
      std::string mapped;
      for (unsigned char c : key) mapped += byte_symbol_[c];
      auto it = vocab_.find(mapped);
      if (it != vocab_.end()) {
        syms.push_back({it->second, 0, key.size()});
        whole = true;
      }
    }
    if (!whole) merge_word(key, syms);
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::move(key), syms);
  }
  if (dropped != nullptr) {
    size_t covered = 0, last_end = 0;
    for (const Sym& s : syms) {
      if (s.begin >= last_end) covered += s.end - s.begin;  // byte-fallback pieces share a byte
      last_end = std::max(last_end, s.end);
    }
    *dropped += static_cast<int64_t>(bytes.size() - covered);
  }
  for (const Sym& s : syms) out.push_back({s.id, s.begin, s.end});
}

}  // namespace magi2::qwen35
