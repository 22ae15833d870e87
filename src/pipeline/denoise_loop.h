// The denoising loop with every per-step tensor resident on the DiT's backend
// (spec pipeline §4-5; official Magi2PreviewSampler.sample): built once per
// request shape, then one step = scatter the latents into the packed tokens ->
// time channels of the step -> DiT forward of both CFG branches -> gather the
// prediction -> CFG -> FlowUniPC for video and for audio -> step counter + 1.
// A step only enqueues backend ops over buffers planned here, so the CPU runs it
// in order and the CUDA backend captures it once as a CUDA graph and replays it
// for every step (no host sync, no allocation inside a step).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/magi2_dit/dit.h"
#include "pipeline/cfg.h"
#include "pipeline/flow_unipc.h"
#include "pipeline/packing.h"

namespace magi2 {

/// Host-side description of a request for DenoiseLoop.
struct DenoiseSetup {
  const PackingPlan* plan = nullptr;  ///< token layout (outlives the loop)
  Tensor x_static;                    ///< [N, C_pad] f32 host: pack_static_tokens() (text, image rows)
  std::vector<int64_t> timesteps;     ///< scheduler timesteps, one per step
  std::vector<UniPcStepCoef> solver;  ///< FlowUniPC::step_table(), one row per step (video and audio share it)
  float video_scale = 5.f;            ///< CFG scales (CfgConfig, as f32)
  float audio_scale = 7.f;
  Tensor latent;                      ///< [1, 48, T, H, W] f32 host initial noise
  Tensor audio_latent;                ///< [1, La, 64] f32 host initial noise
};

/// One request's denoising state on the backend of `dit`.
class DenoiseLoop {
 public:
  /// Uploads the static tokens, index maps, time-embedding and solver tables
  /// and the initial latents; plans the DiT workspace. Errors: shapes that
  /// disagree with the plan; out of device memory (names the buffer).
  DenoiseLoop(Dit& dit, const DenoiseSetup& setup);

  /// Enqueues one step (eager; `opt` carries testing hooks such as forced
  /// routing or dumps, which need the eager path).
  void step(const DitRunOptions& opt = {});
  /// Records one step as a graph (after at least one eager step, so every
  /// plan and workspace exists). CUDA: Error if the step syncs or allocates.
  void capture();
  /// Enqueues the recorded step (capture() first).
  void replay();
  bool captured() const { return graph_ != nullptr; }

  /// Host copies of the current latents [1, 48, T, H, W] / [1, La, 64] (wait for the device).
  Tensor latent_host() const;
  Tensor audio_latent_host() const;
  /// Overwrites the current latents from host tensors of the same shapes
  /// (testing: teacher forcing).
  void set_latents(const Tensor& latent, const Tensor& audio_latent);
  /// First step at which a latent became non-finite, per stream (0 video,
  /// 1 audio), or -1 when none did; reads the device flags (a host wait).
  std::pair<int, int> first_nonfinite_step() const;

  /// Bytes of the loop's own device buffers (the DiT workspace not included).
  size_t bytes() const { return bytes_; }
  /// What bytes() will be for a loop over `plan` with `steps` steps and a DiT
  /// of `out_cols` output columns, computed without allocating (memory plan).
  static size_t planned_bytes(const PackingPlan& plan, int64_t steps, int64_t out_cols);

 private:
  Tensor up(const Tensor& host);

  Dit& dit_;
  Backend& be_;
  DitInputs in_;                // x, coords, time_emb on the device; modality, cu_seqlens on the host
  Tensor latent_, audio_;       // solver samples [48*T*H*W], [La*64]
  Tensor last_v_, m0_v_, m1_v_, last_a_, m0_a_, m1_a_;
  Tensor pred_v_, pred_a_, v_v_, v_a_;  // [2, n] predictions, [n] guided velocities
  Tensor video_src_, video_dst_, audio_src_, audio_dst_, out_video_, out_audio_, noisy_rows_;
  Tensor temb_table_, solver_, step_, nonfinite_;
  Shape vshape_, ashape_;
  float video_scale_ = 5.f, audio_scale_ = 7.f;
  size_t bytes_ = 0;
  std::unique_ptr<StepGraph> graph_;
};

}  // namespace magi2
