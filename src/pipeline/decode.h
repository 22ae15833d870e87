// Final latents -> a playable clip: the TurboVAE video decode and the Stable
// Audio Open (Oobleck) audio decode with its 44.1 kHz resample (spec
// magi2-pipeline.md §6.1, §6.2, §7.1; official inference_engine.py
// decode_video / decode_audio). Decoders are loaded from the official folder
// layout: MODEL/turbo_vae/ and MODEL/stable-audio-open-1.0/.
#pragma once

#include <string>

#include "core/tensor.h"
#include "media/clip.h"
#include "ops/ops.h"

namespace magi2 {

/// Wall time of each decode phase, milliseconds.
struct DecodeTimes {
  double load_ms = 0, video_ms = 0, audio_ms = 0;
};

/// Checks, before any work, that `model_root` holds both decoder folders
/// (turbo_vae/, stable-audio-open-1.0/). Error naming the missing one.
void check_decoders_present(const std::string& model_root);

/// Decodes the sampler's final latents with the decoders under `model_root`.
/// video_latent [1, 48, T, h, w] f32 -> frames [4T-3, 16h, 16w, 3] u8 RGB;
/// audio_latent [1, La, 64] f32 -> audio [La * 2048 * 441/512, 2] f32 at
/// 44.1 kHz (250 frames -> 441,000 samples = 10 s). fps 12.5.
/// Errors (one line): a missing decoder folder/file (naming it), or latent
/// shapes the decoders cannot take.
Clip decode_clip(const std::string& model_root, const Tensor& video_latent, const Tensor& audio_latent, Backend& be,
                 DecodeTimes* times = nullptr);

}  // namespace magi2
