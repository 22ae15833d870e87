#include "io/checkpoint.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_depth.h"
#include "io/mmap_file.h"

namespace magi2 {

namespace fs = std::filesystem;
using json = nlohmann::json;

Checkpoint Checkpoint::open(const std::string& path) {
  Checkpoint c;
  c.path_ = path;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(str_cat("checkpoint '", path, "' does not exist"));
  if (fs::is_regular_file(path)) {
    auto f = SafetensorsFile::open(path);
    c.shards_.push_back(f);
    for (const auto& e : f->entries()) c.where_[e.name] = 0;
    return c;
  }
  const fs::path dir(path);
  const fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    const fs::path single = dir / "model.safetensors";
    if (fs::exists(single)) return open(single.string());
    throw Error(str_cat("checkpoint folder '", path,
                        "' has neither model.safetensors.index.json nor model.safetensors"));
  }
  const std::string index_text = read_text_file(index.string());
  check_json_depth(index_text, str_cat("checkpoint index '", index.string(), "'"));
  json j;
  try {
    j = json::parse(index_text);
  } catch (const json::exception& e) {
    throw Error(str_cat("checkpoint index '", index.string(), "' is not valid JSON (", e.what(), ")"));
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(str_cat("checkpoint index '", index.string(), "' has no \"weight_map\" object"));
  std::map<std::string, size_t> shard_of_file;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      throw Error(str_cat("checkpoint index '", index.string(), "': weight_map entry '", it.key(),
                          "' is not a file name"));
    const std::string file = it.value().get<std::string>();
    if (file.find('/') != std::string::npos || file == ".." )
      throw Error(str_cat("checkpoint index '", index.string(), "': shard name '", file,
                          "' must be a plain file name"));
    auto sit = shard_of_file.find(file);
    if (sit == shard_of_file.end()) {
      const fs::path sp = dir / file;
      if (!fs::exists(sp))
        throw Error(str_cat("checkpoint '", path, "': shard '", file, "' named in the index is missing"));
      c.shards_.push_back(SafetensorsFile::open(sp.string()));
      sit = shard_of_file.emplace(file, c.shards_.size() - 1).first;
    }
    if (!c.shards_[sit->second]->contains(it.key()))
      throw Error(str_cat("checkpoint '", path, "': tensor '", it.key(), "' is mapped to shard '", file,
                          "' but that shard does not contain it"));
    c.where_[it.key()] = sit->second;
  }
  for (size_t s = 0; s < c.shards_.size(); ++s)
    for (const auto& e : c.shards_[s]->entries()) {
      auto w = c.where_.find(e.name);
      if (w == c.where_.end())
        throw Error(str_cat("checkpoint '", path, "': tensor '", e.name, "' in shard '",
                            fs::path(c.shards_[s]->path()).filename().string(),
                            "' is not listed in the index weight_map"));
      // A second copy in another shard would make the loaded weights depend on the index alone.
      if (w->second != s)
        throw Error(str_cat("checkpoint '", path, "': tensor '", e.name, "' is in two shards, '",
                            fs::path(c.shards_[w->second]->path()).filename().string(), "' and '",
                            fs::path(c.shards_[s]->path()).filename().string(), "'"));
    }
  return c;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> n;
  n.reserve(where_.size());
  for (const auto& [k, v] : where_) n.push_back(k);
  return n;
}

const SafetensorsEntry& Checkpoint::entry(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(str_cat("checkpoint '", path_, "': no tensor '", name, "'"));
  return shards_[it->second]->entry(name);
}

Tensor Checkpoint::tensor(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(str_cat("checkpoint '", path_, "': no tensor '", name, "'"));
  return shards_[it->second]->tensor(name);
}

size_t Checkpoint::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, s] : where_) {
    const auto& e = shards_[s]->entry(name);
    n += e.end - e.begin;
  }
  return n;
}

}  // namespace magi2
