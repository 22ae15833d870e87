// The denoising loop of MAGI-2 Preview from conditioning to final latents
// (spec magi2-pipeline.md §4-5; official inference/pipeline/sampler.py
// Magi2PreviewSampler.sample): per step pack -> DiT -> unpack -> CFG -> one
// FlowUniPC step for video and one for audio.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "models/magi2_dit/dit.h"
#include "pipeline/cfg.h"
#include "pipeline/packing.h"

namespace magi2 {

/// Latent shape of a clip of `seconds` at width_px x height_px (spec pipeline
/// §3.1-3.2; official Magi2InferenceEngine._resolve_lengths): video frames
/// n = round(seconds * fps * 2) on the 25 fps timeline, latent frames
/// (n - 1) / 8 + 1, audio latent frames round(seconds * 25), spatial /16.
/// Errors: seconds <= 0 or too short for one frame, pixels not multiples of 16.
LatentShape latent_shape_for_clip(double seconds, int64_t width_px, int64_t height_px, double fps = 12.5);

/// One generation request at the latent level.
struct GenerateRequest {
  LatentShape latent;       ///< video [48, T, H, W] and audio [La, 64] latent sizes
  Tensor text_cond;         ///< [Lc, C_text] or [1, Lc, C_text], F32/BF16 (encoder features)
  Tensor text_uncond;       ///< negative-prompt features, same layout
  int num_steps = 100;
  double shift = 7.0;
  uint64_t seed = 42;
  CfgConfig cfg;
  /// I2VA (optional, both or neither): the reference image latent [48, 1, h, w]
  /// f32 (encode_reference_image, spec pipeline §1.3) and its `<Figure 1>`
  /// special token [1, C_text] (the prompt features' mean over the figure
  /// tokens, spec §2.6). Both CFG branches get them (use_ref_for_uncond, §4.1).
  Tensor ref_image_latent;
  Tensor ref_special_token;
  Tensor init_latent;        ///< optional [1, 48, T, H, W] f32 noise (else seeded Philox)
  Tensor init_audio_latent;  ///< optional [1, La, 64] f32 noise
  /// Testing: per MoE layer l, the expert selection of every step
  /// [steps, heads, N, k] (I32/I64); undefined entries route naturally.
  std::vector<Tensor> routing_override;
  /// Testing: called after every step with host copies of the latents, which
  /// it may modify (teacher forcing); they are copied back before the next
  /// step. Return false to cancel. Setting it runs every step eagerly with a
  /// device round trip; progress reporting wants on_progress instead.
  std::function<bool(struct GenerateStep&)> on_step;
  /// Called after every step (the step has finished on the device): step
  /// (0-based), steps, its timestep and wall milliseconds. Return false to
  /// cancel at this step boundary. Cheap: no tensor leaves the device.
  std::function<bool(int step, int steps, int64_t timestep, double ms)> on_progress;
  /// Record step 1 as one graph and replay it for the rest (CUDA graphs; the
  /// CPU re-runs the same ops). false: every step eager (debugging).
  bool use_graph = true;
};

/// What on_step sees after step `step` (0-based) of `steps`.
struct GenerateStep {
  int step = 0;
  int steps = 0;
  int64_t timestep = 0;  ///< scheduler timestep of this step
  double ms = 0;         ///< wall time of the step
  Tensor& latent;        ///< [1, 48, T, H, W] f32 after the step
  Tensor& audio_latent;  ///< [1, La, 64] f32 after the step
};

/// Final latents and timings of a run.
struct GenerateResult {
  Tensor latent;        ///< [1, 48, T, H, W] f32
  Tensor audio_latent;  ///< [1, La, 64] f32
  std::vector<double> step_ms;  ///< wall time of each denoising step
  int64_t tokens = 0;           ///< packed tokens per forward (both CFG branches)
  size_t workspace_bytes = 0;   ///< device bytes of the DiT workspace + the loop's buffers
  bool cancelled = false;
};

/// Runs the whole denoising loop on `dit`. Errors: Error naming the request
/// field whose shape disagrees with the DiT config or the latent shape.
GenerateResult generate_latents(Dit& dit, const GenerateRequest& req);

}  // namespace magi2
