// `magi2 bench --stage decode`: the codecs at the release widths on the
// --device backend: the TurboVAE decoder (spec magi2-pipeline.md §6.1, widths
// 64, 128, 256, 512) on the latent of a 10 s 272p clip and the Stable Audio
// Open decoder (§6.2, base width 128) on its audio latent, with seeded random
// weights written once to a folder (the tiny writers at the release widths).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "ops/ops.h"

namespace magi2::cli {

/// What to time: timed decodes after untimed warm-ups; `dir` holds (or gets)
/// the random-weight turbo_vae/ and stable-audio-open-1.0/ folders.
struct DecodeBenchArgs {
  std::string dir;
  int steps = 3, warmup = 1;
};

/// Runs the bench on `be`, which must be a CUDA backend (the CPU backend takes
/// minutes per TurboVAE decode at these widths: Error saying so). Reports per
/// codec the decode milliseconds (median; the video as bf16 frames and as
/// uint8, the audio with and without the host resample), the input and output
/// shapes and the peak device bytes. Errors: bad arguments, no CUDA backend,
/// a folder that cannot be written, a device failure.
nlohmann::json bench_decode(const DecodeBenchArgs& a, Backend& be);

}  // namespace magi2::cli
