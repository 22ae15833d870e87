// `magi2 bench --stage decode`: the codecs at the release widths on the
// --device backend, each on what the pipeline hands it for a 10 s clip: the
// TurboVAE decoder (spec magi2-pipeline.md §6.1, widths 64, 128, 256, 512) on
// the final latent of each asked resolution (272p, 540p, and 1080p's refined
// latent), the Stable Audio Open decoder (§6.2, base width 128) on the audio
// latent once (the same at every resolution), and the Wan2.2 VAE image
// encoder (§6.3, width 160; I2VA) on one reference image at each preview
// size. Seeded random weights are written once to a folder in the official
// layout (the tiny writers at the release widths, as `magi2 make-random`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "ops/ops.h"

namespace magi2::cli {

/// What the pipeline decodes for a 10 s clip at one `--resolution`.
struct DecodeTarget {
  std::string resolution;  ///< 272p, 540p or 1080p
  Shape latent;            ///< the TurboVAE input [1, 48, T, h, w] (1080p: the refiner's output latent)
  int64_t preview_width = 0, preview_height = 0;  ///< preview pixels: the size the reference image is encoded at
  int64_t audio_frames = 0;                       ///< audio latent frames (25 per second)
};

/// The target of `resolution`, from the functions the engine sizes a request
/// with (GenerateParams' preview and refiner sizes, latent_shape_for_clip at the
/// release fps, refined_latent_size with the release refiner config):
/// 272p [1, 48, 32, 16, 28] (448x256), 540p [1, 48, 32, 32, 56] (896x512),
/// 1080p [1, 48, 63, 68, 120] (1920x1088, preview 896x512).
/// Error (naming --resolutions) for any other name.
DecodeTarget decode_target(const std::string& resolution);

/// Splits a comma-separated --resolutions list ("272p,540p"), empty items
/// skipped, and checks every name (decode_target). Errors: an unknown name, a
/// repeated one, an empty list; each naming --resolutions.
std::vector<std::string> parse_decode_resolutions(const std::string& list);

/// What to time: timed calls after untimed warm-ups; `dir` holds (or gets) the
/// random-weight turbo_vae/, stable-audio-open-1.0/ and vae/Wan2.2_VAE.pth (the
/// official layout: a `magi2 make-random` folder serves as well).
struct DecodeBenchArgs {
  std::string dir;
  std::vector<std::string> resolutions = {"272p", "540p"};
  int steps = 3, warmup = 1;
  /// Tests: the tiny layouts' widths (make-tiny's codecs) instead of the
  /// release's, so the whole flow runs on the CPU backend in seconds; the
  /// backend is then not checked. `dir` must not hold release-width codecs.
  bool tiny_widths = false;
  /// Called with each entry as soon as it is measured (codec "turbovae",
  /// "oobleck" or "wan22_encoder"), so a caller can print it before a later
  /// part fails.
  std::function<void(const std::string& codec, const nlohmann::json& entry)> on_entry;
};

/// Runs the bench on `be`, which must be a CUDA backend unless tiny_widths
/// (the CPU backend takes minutes per TurboVAE decode at the release widths:
/// Error saying so, before any weight is written). Every entry has the input and output shapes, `model_ms`
/// (the model alone: TurboVAE's bf16 frames, Oobleck's 2048-per-frame
/// waveform, the Wan2.2 encoder on ready pixels), `pipeline_ms` (the call the
/// engine makes: ClipDecoders::decode_frames to uint8 frames, the audio with
/// its 44.1 kHz host resample, encode_reference_image from a PNG file), both
/// medians in wall milliseconds including the host <-> device copies, and on
/// CUDA the device bytes in use before (`weights_bytes`) and at most during
/// (`peak_allocated_bytes`) that entry's calls. Returns {"turbovae": [..],
/// "oobleck": {..}, "wan22_encoder": [..], "steps", "warmup"}. Errors: bad
/// arguments, no CUDA backend, a folder that cannot be written, a device
/// failure (out of memory included).
nlohmann::json bench_decode(const DecodeBenchArgs& a, Backend& be);

}  // namespace magi2::cli
