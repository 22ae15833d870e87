// CFG combination: see cfg.h.
#include "pipeline/cfg.h"

#include "ops/numerics.h"

#include <cmath>

namespace magi2 {

void validate_cfg_config(const CfgConfig& cfg) {
  MAGI2_CHECK(std::isfinite(cfg.video_txt_guidance_scale),
              "cfg: video_txt_guidance_scale must be finite, got ", cfg.video_txt_guidance_scale);
  MAGI2_CHECK(std::isfinite(cfg.audio_txt_guidance_scale),
              "cfg: audio_txt_guidance_scale must be finite, got ", cfg.audio_txt_guidance_scale);
  MAGI2_CHECK(!cfg.use_cfg_trick,
              "cfg: use_cfg_trick=true is not supported (only the released preview config, "
              "use_cfg_trick=false)");
  MAGI2_CHECK(!cfg.use_dynamic_cfg,
              "cfg: use_dynamic_cfg=true is not supported (only the released preview config, "
              "use_dynamic_cfg=false)");
  MAGI2_CHECK(!cfg.use_skimmed_cfg_linear,
              "cfg: use_skimmed_cfg_linear=true is not supported (only the released preview "
              "config, use_skimmed_cfg_linear=false)");
  MAGI2_CHECK(std::isfinite(cfg.cfg_rescale) && cfg.cfg_rescale >= 0,
              "cfg: cfg_rescale must be a non-negative finite number, got ", cfg.cfg_rescale);
  MAGI2_CHECK(cfg.cfg_rescale == 0.0, "cfg: cfg_rescale=", cfg.cfg_rescale,
              " is not supported (only the released preview config, cfg_rescale=0)");
}

void cfg_combine(std::span<const float> cond, std::span<const float> uncond, double scale,
                 std::span<float> out) {
  MAGI2_CHECK(cond.size() == uncond.size() && cond.size() == out.size(),
              "cfg_combine: sizes differ (cond ", cond.size(), ", uncond ", uncond.size(),
              ", out ", out.size(), ")");
  // Upstream the scale reaches the kernel as an f32 (tensor or opmath scalar).
  const float s = static_cast<float>(scale);
  for (size_t k = 0; k < out.size(); ++k) out[k] = cfg_combine_f32(cond[k], uncond[k], s);
}

namespace {

Tensor combine_pair(const Tensor& cu, double scale, const char* what) {
  MAGI2_CHECK(cu.defined(), what, ": prediction tensor is undefined");
  MAGI2_CHECK(cu.dtype() == DType::F32, what, ": prediction must be F32, got ",
              dtype_name(cu.dtype()));
  MAGI2_CHECK(cu.device() == Device::CPU, what, ": prediction must be a CPU tensor");
  MAGI2_CHECK(cu.is_contiguous(), what, ": prediction must be contiguous");
  MAGI2_CHECK(cu.dim() >= 1 && cu.size(0) == 2, what,
              ": prediction must have leading dim 2 ([cond, uncond]), got shape ",
              shape_str(cu.shape()));
  if (cu.numel() == 0) return Tensor();
  Shape out_shape = cu.shape();
  out_shape[0] = 1;
  Tensor out = Tensor::empty(out_shape, DType::F32);
  const size_t n = static_cast<size_t>(out.numel());
  const float* p = cu.data_as<float>();
  cfg_combine(std::span<const float>(p, n), std::span<const float>(p + n, n), scale,
              std::span<float>(out.data_as<float>(), n));
  return out;
}

}  // namespace

Tensor cfg_video(const Tensor& cond_uncond, const CfgConfig& cfg) {
  validate_cfg_config(cfg);
  return combine_pair(cond_uncond, cfg.video_txt_guidance_scale, "cfg_video");
}

Tensor cfg_audio(const Tensor& cond_uncond, const CfgConfig& cfg) {
  validate_cfg_config(cfg);
  return combine_pair(cond_uncond, cfg.audio_txt_guidance_scale, "cfg_audio");
}

}  // namespace magi2
