// `magi2 bench --stage refiner`: one 1080p refiner forward (and the step's two
// CFG forwards) at the release width with seeded random weights, graph-replayed.
#pragma once

#include <nlohmann/json.hpp>

#include "ops/ops.h"

namespace magi2::cli {

/// What to time: the first `layers` layers of the release refiner (0: all 30;
/// mm layers kept at both ends), text tokens per forward, timed replays.
struct RefinerBenchArgs {
  int layers = 0;
  int64_t text_len = 300;
  int steps = 2, warmup = 0;
  bool profile = true;
  /// Timed steps of the pipeline's own refine loop (refine_latents, eager, host
  /// work included) after the graph replays, plus one untimed first step; 0: none.
  int pipeline_steps = 0;
  int64_t text_uncond_len = 400;  ///< text tokens of the pipeline steps' uncond branch
  /// Refined pixels and latent frames: 1080p of a 10 s clip (preview latent T = 32 -> 2T - 1 = 63 frames).
  int64_t width_px = 1920, height_px = 1088, frames = 63;
};

/// Runs the bench on `be` (CUDA: weights drawn on the device; CPU works but is
/// far too slow at 1080p). Returns tokens, pairs, FLOP by component, forward
/// and step milliseconds (median of `steps` replays; step = 2 forwards),
/// workspace and weight bytes, eager per-region times when profiling.
/// Errors: Error on bad arguments or a device failure.
nlohmann::json bench_refiner(const RefinerBenchArgs& a, Backend& be);

}  // namespace magi2::cli
