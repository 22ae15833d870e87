// Final latents -> a playable clip: the TurboVAE video decode and the Stable
// Audio Open (Oobleck) audio decode with its 44.1 kHz resample (spec
// magi2-pipeline.md §6.1, §6.2, §7.1; official inference_engine.py
// decode_video / decode_audio). Decoders are loaded from the official folder
// layout: MODEL/turbo_vae/ and MODEL/stable-audio-open-1.0/.
#pragma once

#include <string>

#include "core/tensor.h"
#include "media/clip.h"
#include "models/oobleck/decoder.h"
#include "models/turbovae/decoder.h"
#include "ops/ops.h"

namespace magi2 {

/// Wall time of each decode phase, milliseconds.
struct DecodeTimes {
  double video_ms = 0, audio_ms = 0;
};

/// Both decoders of a model folder, loaded (and so validated) once, before
/// the denoising loop, as the official engine loads every model at start:
/// a corrupt decoder checkpoint fails before any step is spent.
class ClipDecoders {
 public:
  /// Loads `model_root`/turbo_vae/ and `model_root`/stable-audio-open-1.0/ on
  /// `be` (which must outlive this). Errors (one line): a missing folder or
  /// file, a corrupt or mismatched checkpoint (naming it).
  static ClipDecoders load(const std::string& model_root, Backend& be);

  /// video_latent [1, 48, T, h, w] f32 -> frames [4T-3, 16h, 16w, 3] u8 RGB;
  /// audio_latent [1, La, 64] f32 -> audio [La * 2048 * 441/512, 2] f32 at
  /// 44.1 kHz (250 frames -> 441,000 samples = 10 s); fps 12.5.
  /// Errors: latent shapes the decoders cannot take; a NaN/Inf in either
  /// latent or in the decoded audio (naming the stream; nothing is decoded
  /// further, so no output gets written).
  Clip decode(const Tensor& video_latent, const Tensor& audio_latent, DecodeTimes* times = nullptr) const;

  /// The video half of decode(): video_latent [1, 48, T, h, w] f32 -> frames
  /// [4T-3, 16h, 16w, 3] u8 RGB (T = 1: one frame, as for a preview).
  /// Errors: a latent shape the decoder cannot take.
  Tensor decode_frames(const Tensor& video_latent) const;

  /// The loaded decoders, for `magi2 bench --stage decode`, which times their parts apart.
  const TurboVaeDecoder& video() const { return video_; }
  const OobleckDecoder& audio() const { return audio_; }

 private:
  ClipDecoders(TurboVaeDecoder video, OobleckDecoder audio) : video_(std::move(video)), audio_(std::move(audio)) {}
  TurboVaeDecoder video_;
  OobleckDecoder audio_;
};

}  // namespace magi2
