// A checkpoint folder in the HF layout: either `model.safetensors.index.json`
// ({"metadata": {"total_size"}, "weight_map": {name: shard}}) plus shards, or a
// single `*.safetensors` file. Tensors are zero-copy views over mmap'd shards.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace magi2 {

/// All tensors of one model component, across its shards.
class Checkpoint {
 public:
  /// Opens a folder (index or a single .safetensors inside) or a .safetensors
  /// file. Errors name the folder, the index, the shard and the tensor: missing
  /// folder/index/shard, bad index JSON, a weight_map entry absent from its shard,
  /// a tensor present in a shard but not in the weight_map, a name in two shards.
  static Checkpoint open(const std::string& path);

  const std::string& path() const { return path_; }
  /// Tensor names in sorted order.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  /// Zero-copy view; Error naming the checkpoint and tensor if absent.
  Tensor tensor(const std::string& name) const;
  /// Sum of all tensor byte sizes.
  size_t total_bytes() const;
  size_t num_shards() const { return shards_.size(); }

 private:
  std::string path_;
  std::vector<std::shared_ptr<SafetensorsFile>> shards_;
  std::map<std::string, size_t> where_;  // name -> shard index
};

}  // namespace magi2
