// `magi2 bench --stage load`: how fast the DiT's weights go from the page
// cache of a checkpoint folder to the device (docs/perf.md).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "models/magi2_dit/config.h"
#include "ops/ops.h"

namespace magi2::cli {

/// Writes a DiT checkpoint folder for `arch` with seeded random weights (the
/// bench's fast recipe, not independent draws) in the official layout:
/// `dir`/preview/ with one shard per layer (+ one for the adapters) and its
/// index. Error naming the path when a file cannot be written.
void write_random_dit(const std::string& dir, const DitArch& arch);

/// Binds the DiT of `model` (the official folder or a DiT checkpoint folder)
/// for `arch`, reads every shard once (page cache warm-up), then `reps` times
/// times the load onto `be`: CUDA = DitWeights::to_backend (parallel pread
/// from the shards into pinned buffers, async copies) until the device has
/// it; CPU = the same parallel reads into host buffers. Returns bytes,
/// tensors, shards, each pass's seconds and the median GB/s.
nlohmann::json bench_load(const std::string& model, const DitArch& arch, Backend& be, int reps);

}  // namespace magi2::cli
