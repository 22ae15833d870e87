// Classifier-free guidance combination of the MAGI-2 Preview sampler.
// Source: official inference/pipeline/sampler.py (Magi2PreviewSampler:
// precalculate_cfg, cfg_velocity), configs/magi2_preview.json
// (evaluation_config), spec magi2-pipeline.md §5.4.
//
// With the released configuration every optional guidance feature is off, so
// the combination is, per element, in f32 with one rounding per operation:
//   diff = cond - uncond;  scaled = f32(scale) * diff;  v = uncond + scaled
// with the same scale on every step (video 5.0, audio 7.0).
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace magi2 {

/// The guidance part of the official evaluation_config (CFGConfig). Defaults
/// are the released preview values. Only the defaults of the four optional
/// features are implemented; validate_cfg_config() rejects the others.
/// (use_negative_prompt / use_ref_for_uncond change the model *inputs* of the
/// unconditional branch, not this arithmetic, so they are not here.)
struct CfgConfig {
  double video_txt_guidance_scale = 5.0;  ///< video scale (an f32 1-element tensor upstream)
  double audio_txt_guidance_scale = 7.0;  ///< audio scale (a Python float upstream, f32 in the kernel)
  bool use_cfg_trick = false;             ///< per-frame cap on the first frames: unsupported
  int cfg_trick_start_frame = 13;
  double cfg_trick_value = 2.0;
  bool use_dynamic_cfg = false;           ///< video scale cap for t < start: unsupported
  int dynamic_cfg_start_t = 500;
  double dynamic_cfg_cutoff_value = 2.0;
  bool use_skimmed_cfg_linear = false;    ///< skimmed CFG on the uncond branch: unsupported
  double skimmed_cfg_scale = 3.0;
  double cfg_rescale = 0.0;               ///< std-matching rescale when > 0: unsupported
};

/// Throws Error naming the flag when `cfg` asks for a feature this engine does
/// not implement (use_cfg_trick, use_dynamic_cfg, use_skimmed_cfg_linear,
/// cfg_rescale > 0), or when a guidance scale is not finite or cfg_rescale is
/// negative/non-finite (the official config validator rejects those).
void validate_cfg_config(const CfgConfig& cfg);

/// out[k] = uncond[k] + f32(scale) * (cond[k] - uncond[k]), f32, one rounding
/// per operation (difference, scale, add). All three spans have equal size
/// (Error otherwise); `out` may alias `cond` or `uncond`.
void cfg_combine(std::span<const float> cond, std::span<const float> uncond, double scale,
                 std::span<float> out);

/// Video CFG velocity. `cond_uncond`: contiguous CPU F32 [2, C, T, H, W]
/// (index 0 = cond, 1 = uncond; any rank >= 1 with leading dim 2 is accepted).
/// Returns [1, ...] F32 (the official cond[0:1] slicing keeps the batch dim).
/// An empty prediction (numel 0) returns an undefined Tensor: the official
/// sampler then skips that modality's scheduler step. Errors: bad dtype,
/// device, layout or leading dim; unsupported config flags.
Tensor cfg_video(const Tensor& cond_uncond, const CfgConfig& cfg);

/// Audio CFG velocity. `cond_uncond`: contiguous CPU F32 [2, L, C]; returns
/// [1, L, C]. Same conventions and errors as cfg_video().
Tensor cfg_audio(const Tensor& cond_uncond, const CfgConfig& cfg);

}  // namespace magi2
