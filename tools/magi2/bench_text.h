// `magi2 bench --stage text`: the Qwen3.5-27B text encoder forward at the
// release widths (spec magi2-pipeline.md §2.1) with seeded random weights
// made on the GPU, for prompt lengths of 300 and 2000 tokens.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "ops/ops.h"

namespace magi2::cli {

/// What to time: the first `layers` layers (0: the 62 that hidden_states[-3]
/// needs; the layer kinds keep the release pattern, every 4th full
/// attention), prompt lengths, timed forwards after untimed warm-ups.
struct TextBenchArgs {
  int layers = 0;
  std::vector<int64_t> tokens = {300, 2000};
  int steps = 3, warmup = 1;
  bool profile = true;
  /// --offload layerwise: the layers stream from pinned host memory through
  /// two device slots (LayerOffload); the JSON then has the PCIe bytes and rate.
  bool offload = false;
};

/// Runs the bench on `be`, which must be a CUDA backend (the CPU backend
/// would take minutes per forward at these widths: Error saying so). Per
/// token count: forward milliseconds (median, eager: the text encoder runs
/// once per prompt), the FLOP by component and TFLOP/s, the time scaled to the
/// 62 feature layers, per-region eager times when profiling; weight and peak
/// device bytes; with `offload` the host -> device bytes per forward and GB/s. Errors: bad arguments, no CUDA backend, a device failure.
nlohmann::json bench_text(const TextBenchArgs& a, Backend& be);

}  // namespace magi2::cli
