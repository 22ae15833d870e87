#include "engine/model_writer.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/error.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"

namespace magi2 {

namespace fs = std::filesystem;

void build_model_folder(const std::string& dir, const std::vector<std::string>& subdirs,
                        const std::function<void(const fs::path& tmp)>& write, const std::string& what) {
  if (dir.empty()) throw Error(str_cat(what, ": the output folder name is empty"));
  // "out/" and "out" must give the same temp sibling "out.tmp.<pid>".
  fs::path target = fs::path(dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();
  std::error_code ec;
  if (fs::exists(target, ec)) {
    if (!fs::is_directory(target, ec)) throw Error(str_cat(what, ": '", dir, "' exists and is not a folder"));
    if (!fs::is_empty(target, ec)) throw Error(str_cat(what, ": '", dir, "' exists and is not empty"));
  }
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
    if (ec) throw Error(str_cat(what, ": cannot create '", target.parent_path().string(), "': ", ec.message()));
  }
  // pid + a per-process counter: distinct for concurrent processes and threads.
  static std::atomic<unsigned> counter{0};
  const fs::path tmp = target.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  fs::remove_all(tmp, ec);  // a leftover of a crashed run with a recycled pid
  try {
    for (const std::string& sub : subdirs) {
      fs::create_directories(tmp / sub, ec);
      if (ec) throw Error(str_cat(what, ": cannot create '", (tmp / sub).string(), "': ", ec.message()));
    }
    write(tmp);
    fs::rename(tmp, target, ec);
    if (ec) throw Error(str_cat(what, ": cannot rename '", tmp.string(), "' to '", dir, "': ", ec.message()));
  } catch (...) {
    std::error_code ignore;
    fs::remove_all(tmp, ignore);
    throw;
  }
}

std::string layer_shard_name(const std::string& name, int num_layers) {
  const std::string pre = "block.layers.";
  const int l = name.rfind(pre, 0) == 0 ? std::atoi(name.c_str() + pre.size()) + 1 : 0;
  char b[64];
  std::snprintf(b, sizeof b, "model-%05d-of-%05d.safetensors", l + 1, num_layers + 1);
  return b;
}

uint64_t write_sharded_checkpoint(const std::string& dir, const std::vector<DitTensorSpec>& specs,
                                  const std::function<std::string(const std::string& name)>& shard_of,
                                  const std::function<Tensor(const DitTensorSpec&)>& make, bool sync) {
  std::map<std::string, std::vector<const DitTensorSpec*>> shards;
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total = 0;
  for (const DitTensorSpec& s : specs) {
    const std::string shard = shard_of(s.name);
    weight_map[s.name] = shard;
    uint64_t n = dtype_size(s.dtype);
    for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
    total += n;
    shards[shard].push_back(&s);
  }
  for (const auto& shard_entry : shards) {  // not a structured binding: clang 14 cannot capture one
    const std::string& file = shard_entry.first;
    const auto& list = shard_entry.second;
    std::vector<SafetensorsSpec> st;
    for (const DitTensorSpec* s : list) st.push_back({s->name, s->shape, s->dtype});
    write_safetensors_streamed((fs::path(dir) / file).string(), st, [&](size_t i) { return make(*list[i]); },
                               {{"format", "pt"}}, sync);
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomic((fs::path(dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
  return total;
}

uint64_t folder_bytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) n += it->file_size(ec);
  return n;
}

}  // namespace magi2
