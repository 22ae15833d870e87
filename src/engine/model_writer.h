// Writing model folders in the official layout (spec magi2-pipeline.md §9):
// the all-or-nothing folder build shared by `magi2 make-tiny` and `magi2
// make-random`, and sharded safetensors checkpoints (DiT, refiner) written one
// tensor at a time, so a release-width layer of gigabytes never sits in
// memory twice.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/magi2_dit/weights.h"

namespace magi2 {

/// Builds the folder `dir` all-or-nothing: checks that `dir` is absent or an
/// empty folder, creates its parent folders, creates `subdirs` inside a
/// temporary sibling `dir`.tmp.<pid>.<n>, calls `write(tmp)` to fill it, then
/// renames it to `dir` (rename(2) replaces an empty folder and fails on a
/// non-empty one, so a concurrent writer that got there first is never
/// clobbered). On any error the temporary folder is removed, `dir` is
/// untouched, and the Error (one line, prefixed by `what`, e.g. "make-tiny")
/// names the path: `dir` exists and is not an empty folder, a folder cannot be
/// created, `write` failed, the final rename failed.
void build_model_folder(const std::string& dir, const std::vector<std::string>& subdirs,
                        const std::function<void(const std::filesystem::path& tmp)>& write, const std::string& what);

/// The shard of one tensor in a one-shard-per-layer checkpoint of
/// `num_layers` layers: "model-00001-of-NNNNN.safetensors" for everything
/// outside block.layers.*, "model-(l+2)-of-..." for layer l (NNNNN =
/// num_layers + 1), as the release's per-layer shards.
std::string layer_shard_name(const std::string& tensor_name, int num_layers);

/// Writes a sharded safetensors checkpoint into the existing folder `dir`:
/// every spec goes to the shard `shard_of(spec.name)` (shards written in name
/// order, tensors in spec order, metadata {"format": "pt"}), each tensor made by
/// `make(spec)` just before it is written and dropped after, then
/// `dir`/model.safetensors.index.json ({"metadata": {"total_size"},
/// "weight_map"}, 2-space indented). `sync`: fsync each shard. Returns the
/// tensor bytes (total_size). Errors: those of write_safetensors_streamed
/// (a made tensor of the wrong shape or dtype, write failures naming the path).
uint64_t write_sharded_checkpoint(const std::string& dir, const std::vector<DitTensorSpec>& specs,
                                  const std::function<std::string(const std::string& name)>& shard_of,
                                  const std::function<Tensor(const DitTensorSpec&)>& make, bool sync);

/// Bytes of the regular files under `dir`, recursively (0 for a missing folder).
uint64_t folder_bytes(const std::string& dir);

}  // namespace magi2
