// The refiner stage of the 1080p pipeline (official
// Magi2InferenceEngine.evaluate_magi2_refiner_with_latent; docs/refiner.md §3, §6):
// preview latent -> trilinear resample to 2T-1 frames at the refiner size ->
// one zero-SNR re-noise -> N FlowUniPC steps with two refiner forwards and CFG.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "models/magi2_refiner/config.h"
#include "models/magi2_refiner/refiner.h"

namespace magi2 {

/// Trilinear resample with align_corners=True (torch.nn.functional.interpolate
/// mode "trilinear"): x [1, C, T, H, W] f32 -> [1, C, t, h, w] f32. Output
/// sample i of an axis of n -> m cells reads source position i * (n-1)/(m-1)
/// (0 when m = 1). Errors: a non-5-D input, an empty size.
Tensor resample_trilinear_align_corners(const Tensor& x, int64_t t, int64_t h, int64_t w);

/// The zero-terminal-SNR table of the re-noise (official
/// ZeroSNRDDPMDiscretization()(1000, do_append_zero=False, flip=True)): 1000
/// f32 signal scales, index 0 the cleanest (~1), index 999 exactly 0.
std::vector<float> zero_snr_sigmas();

/// The refiner's latent grid: frames x height x width cells.
struct RefinedLatentSize {
  int64_t frames = 0, height = 0, width = 0;
};

/// The grid the refiner resamples a preview latent of `preview_frames` frames
/// to, for a refined picture of width_px x height_px (official
/// evaluate_magi2_refiner_with_latent; docs/refiner.md §3): 2T-1 frames (the
/// 25 fps timeline), height_px / vae_stride[1] x width_px / vae_stride[2]
/// cells (the pixel size rounded down). 10 s at 1080p: T = 32 -> 63 x 68 x 120,
/// decoded to 249 frames of 1920x1088. The one place refine_latents, the
/// memory plan and `magi2 bench --stage decode` take this size from.
/// Errors: preview_frames < 1, a vae_stride without 3 positive entries, a
/// size below one latent cell.
RefinedLatentSize refined_latent_size(const RefinerEval& eval, int64_t preview_frames, int64_t width_px,
                                      int64_t height_px);

/// One refiner request at the latent level.
struct RefineRequest {
  Tensor preview_latent;  ///< [1, 48, T, h, w] f32: the preview's final latent
  Tensor text_cond;       ///< [Lc, C_text] or [1, Lc, C_text] prompt features (F32/BF16)
  Tensor text_uncond;     ///< negative-prompt features, same layout
  int64_t width_px = 1920, height_px = 1088;  ///< refiner output size (rounded down to multiples of 16)
  int num_steps = -1;     ///< -1: the config's magi2_refiner_num_inference_steps
  uint64_t seed = 42;     ///< Philox seed of the re-noise draw
  Tensor renoise;         ///< optional [1, 48, 2T-1, H, W] f32 noise instead of the seeded draw (tests)
  /// Testing: after step k (0-based) with the latent (modifiable: teacher forcing).
  std::function<void(int step, Tensor& latent)> on_step;
  /// After every step: step (0-based), steps, wall ms. Return false to cancel.
  std::function<bool(int step, int steps, double ms)> on_progress;
};

/// The refined latent and timings.
struct RefineResult {
  Tensor latent;                 ///< [1, 48, 2T-1, H, W] f32
  std::vector<double> step_ms;   ///< wall time of each step (two forwards)
  int64_t tokens = 0;            ///< tokens of the conditional forward
  bool cancelled = false;
};

/// One CFG branch's forward as refine_latents runs it, eagerly: the inputs
/// split by modality (split_refiner_inputs: no [N, c_pad] host tensor), load,
/// run, output, and the video rows unpacked to a latent [1, C_v, T, H, W] f32.
/// latent [1, C_v, T, H, W] f32 at the plan's grid; text [Lt, C_t] (or
/// [1, Lt, C_t]). `magi2 bench --stage refiner` times steps of two of these.
/// Errors: those of split_refiner_inputs and Refiner::load.
Tensor refiner_branch_forward(Refiner& model, const RefinerPlan& plan, const Tensor& latent, const Tensor& text);

/// Runs the refiner stage on `model`. Errors: Error naming the request field
/// at fault (latent shape, text features, sizes, steps).
RefineResult refine_latents(Refiner& model, const RefinerConfig& config, const RefineRequest& req);

}  // namespace magi2
