#include "pipeline/decode.h"

#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "core/finite.h"

namespace magi2 {

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

std::string need_dir(const std::string& root, const char* name, const char* what) {
  const std::filesystem::path p = std::filesystem::path(root) / name;
  MAGI2_CHECK(std::filesystem::is_directory(p), "model folder '", root, "' has no ", name, "/ (", what,
              "): pass a complete official model folder, or --no-decode");
  return p.string();
}

}  // namespace

ClipDecoders ClipDecoders::load(const std::string& model_root, Backend& be) {
  const std::string turbo_dir = need_dir(model_root, "turbo_vae", "the TurboVAE video decoder");
  const std::string sao_dir = need_dir(model_root, "stable-audio-open-1.0", "the Stable Audio Open audio decoder");
  return ClipDecoders(TurboVaeDecoder::load(turbo_dir, be), OobleckDecoder::load(sao_dir, be));
}

Tensor ClipDecoders::decode_frames(const Tensor& video_latent) const {
  MAGI2_CHECK(video_latent.dim() == 5 && video_latent.size(0) == 1 && video_latent.dtype() == DType::F32,
              "decode: video latent must be f32 [1, C, T, h, w], got ", shape_str(video_latent.shape()));
  // The official decode_video drops the batch axis: latent[0] is [C, T, h, w].
  const Shape vs = video_latent.shape();
  return video_.decode(video_latent.reshape({vs[1], vs[2], vs[3], vs[4]}));
}

Clip ClipDecoders::decode(const Tensor& video_latent, const Tensor& audio_latent, DecodeTimes* times) const {
  MAGI2_CHECK(audio_latent.dim() == 3 && audio_latent.size(0) == 1 && audio_latent.dtype() == DType::F32,
              "decode: audio latent must be f32 [1, La, C], got ", shape_str(audio_latent.shape()));
  // A diverged latent would decode to plausible-looking garbage (NaN becomes
  // some uint8 value): stop here, before any output exists.
  check_finite(video_latent, "decode: video latent");
  check_finite(audio_latent, "decode: audio latent");
  DecodeTimes t;
  Clip clip;
  auto t0 = std::chrono::steady_clock::now();
  clip.frames = decode_frames(video_latent);
  t.video_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  clip.audio = audio_.decode(audio_latent);
  t.audio_ms = ms_since(t0);
  check_finite(clip.audio, "decode: decoded audio (Stable Audio Open VAE output)");
  clip.fps = static_cast<double>(kClipFpsNum) / kClipFpsDen;
  clip.sample_rate = kClipSampleRate;
  if (times) *times = t;
  return clip;
}

}  // namespace magi2
