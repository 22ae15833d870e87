// The MAGI-2 Preview DiT forward (spec magi2-dit.md §5): pre-adapter, 40 layers
// of mHC + attention + dense MLP / multi-head MoE, post-adapter.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/magi2_dit/config.h"
#include "models/magi2_dit/weights.h"
#include "ops/ops.h"

namespace magi2 {

/// Packed DiT inputs (spec §3.1; schema of shared/golden/dit_tiny/dit_io.safetensors).
/// modality and cu_seqlens are the static token layout of a request shape and
/// live on the host; x, coords and time_emb may be host tensors (staged onto
/// the backend by forward) or already on the backend's device (the GPU step).
struct DitInputs {
  Tensor x;         ///< [N, C_pad] f32, per-token features zero-padded on the right
  Tensor coords;    ///< [N, 9] f32 (t, h, w, T, H, W, refT, refH, refW)
  Tensor modality;  ///< [N] i32 host: 0 video, 1 audio, 2 text, 3 time (treated as text)
  Tensor time_emb;  ///< [N, 64] f32, written over channels 0..63 after the pre-adapter
  std::vector<int32_t> cu_seqlens;  ///< [B+1] sample boundaries (both CFG branches)
};

/// Per-call options: testing hooks that never change the default numerics.
struct DitRunOptions {
  /// Teacher forcing: for MoE layer l (index into the model's layers), the
  /// expert selection [MH, N, K] i32 in original token order; weights are still
  /// computed from our own router scores. Empty or undefined entries: natural routing.
  std::vector<Tensor> forced_topk;
  /// Called with named intermediates (host tensors, original token order;
  /// the forward then runs eagerly with host copies, never inside a graph):
  /// pre_adapter_x, rope, block_in, l{i}_attn_in, l{i}_attn_out, l{i}_h_post_attn,
  /// l{i}_h_res_attn, l{i}_mlp_in, l{i}_mlp_out, l{i}_h_post_mlp, l{i}_h_res_mlp,
  /// l{i}_out, l{i}_moe_x_heads, l{i}_moe_topk_idx [MH,N,K] i32, l{i}_moe_margin.
  std::function<void(const std::string&, const Tensor&)> dump;
};

class DitWorkspace;
class DitOffload;

/// A DiT bound to weights and a backend. Activations live in a workspace
/// planned once per token count and reused by every later forward of that
/// size (static shapes per resolution: a denoising loop allocates once).
class Dit {
 public:
  /// `weights` must outlive the Dit. Throws Error on an invalid arch.
  Dit(const DitArch& arch, const DitWeights& weights, Backend& backend);
  /// A Dit streaming its layers (`--offload layerwise`): computes from
  /// offload.weights(), and every forward enqueues the layer copies and fences
  /// around its layers. `offload` must outlive the Dit.
  Dit(const DitArch& arch, DitOffload& offload, Backend& backend);
  ~Dit();

  /// One forward. Returns out [N, 64] f32 on the backend's device (spec
  /// §3.11): video rows cols 0..47, audio rows cols 0..63, text rows 0. The
  /// result is a workspace buffer, overwritten by the next forward. Errors name
  /// the offending input. Enqueues ops only (no host wait, no allocation) once
  /// prepare() has seen this layout, so a forward can be captured into a graph.
  Tensor forward(const DitInputs& in, const DitRunOptions& opt = {});

  /// Plans the workspace and the device index tensors (modality permutation,
  /// sample boundaries) for the layout of `in` (its N, C_pad, modality and
  /// cu_seqlens; the values of x, coords and time_emb are not read). Called by
  /// forward when the layout changes; call it before capturing a step.
  void prepare(const DitInputs& in);

  /// Bytes of the activation workspace planned for the current layout (0 before).
  size_t workspace_bytes() const;

  const DitArch& arch() const { return arch_; }
  Backend& backend() const { return be_; }

 private:
  void validate(const DitInputs& in) const;
  void layer(int l, const DitRunOptions& opt);
  // The branch bodies of layer l: each reads the branch input's pre-norm from
  // the workspace's xn (and xn8), which mhc_pre wrote, and writes out [N, D].
  void attention(int l, const Tensor& out);
  void dense_mlp(int l, const Tensor& out);
  void moe(int l, const Tensor& out, const DitRunOptions& opt);
  /// Host copy of a permuted-order [N, ...] tensor, back in original order.
  Tensor unpermute(const Tensor& t) const;
  void dump(const DitRunOptions& opt, const std::string& name, const Tensor& permuted) const;
  /// `t` if it is on the backend's device, else `t` copied into `staging`.
  Tensor stage(const Tensor& t, Tensor& staging) const;

  DitArch arch_;
  const DitWeights& w_;
  Backend& be_;
  DitOffload* offload_ = nullptr;
  std::unique_ptr<DitWorkspace> ws_;
};

}  // namespace magi2
