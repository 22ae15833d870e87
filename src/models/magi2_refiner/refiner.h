// The MAGI-2 refiner transformer forward on a Backend (official
// inference/model/magi2_refiner.py Transformer.forward; docs/refiner.md §2):
// pre-adapter, layers of gated GQA block-window attention + SwiGLU7 MLP with
// per-modality weights in the mm layers, post-adapter. No timestep input.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/magi2_refiner/config.h"
#include "models/magi2_refiner/tokens.h"
#include "models/magi2_refiner/weights.h"
#include "ops/ops.h"

namespace magi2 {

/// Testing hook: named intermediates as host f32 tensors in packed token
/// order: rope, pre_adapter_x, block_in, l{i}_attn_out, l{i}_out.
using RefinerDump = std::function<void(const std::string&, const Tensor&)>;

class RefinerWorkspace;

/// A refiner bound to weights and a backend; activations are planned once per
/// layout and reused by later forwards of the same layout.
class Refiner {
 public:
  /// `weights` must outlive the Refiner. Throws Error on an invalid arch.
  Refiner(const RefinerArch& arch, const RefinerWeights& weights, Backend& backend);
  ~Refiner();

  /// One forward: x [N, c_pad] f32 packed by pack_refiner_tokens for `plan`.
  /// Returns out [N, 64] f32 host tensor in packed order (video rows cols
  /// 0..47, audio rows 0..63, text rows 0). Errors name the offending input.
  Tensor forward(const RefinerPlan& plan, const Tensor& x, const RefinerDump& dump = {});

  /// forward() in three parts, for CUDA graph capture of the middle one:
  /// load() plans the layout (allocating on a new one) and uploads x and the
  /// coordinates; run() enqueues the forward on the backend without a host
  /// wait, allocation or host copy (capturable once an eager run() of the
  /// layout has planned its attention pairs; `dump` only when eager);
  /// output() copies out [N, 64] f32 (packed order) to the host.
  void load(const RefinerPlan& plan, const Tensor& x);
  /// load() from the inputs split by modality (split_refiner_inputs): the same
  /// device state as load(plan, pack_refiner_tokens(...)) without the [N, c_pad]
  /// f32 host tensor, its host permutation and its upload (3 x 10.5 GB of host
  /// memory traffic per forward at 1080p: ~25 s per refine step). Only the
  /// columns the pre-adapter reads go up. Errors: an input whose shape is not
  /// [rows of its modality in the plan, the arch's in-channels] f32.
  void load(const RefinerPlan& plan, const RefinerInputs& in);
  void run(const RefinerDump& dump = {});
  Tensor output() const;
  /// Bytes of the current layout's activations (0 before the first load and
  /// after release_workspace).
  size_t workspace_bytes() const;
  /// Frees the activations (the weights stay bound): the engine calls it when
  /// the refine phase ends, since the memory plan's decode phase holds only
  /// the refiner's weights (at 1080p the activations are ~100 GB). The next
  /// load() plans them again.
  void release_workspace();

  const RefinerArch& arch() const { return arch_; }
  Backend& backend() const { return be_; }

 private:
  void prepare(const RefinerPlan& plan);
  void layer(int l, const RefinerDump& dump);
  Tensor unpermute(const Tensor& t) const;

  RefinerArch arch_;
  const RefinerWeights& w_;
  Backend& be_;
  std::unique_ptr<RefinerWorkspace> ws_;
  Tensor plan_q_, plan_k_;  ///< the attention pairs of the current forward's plan (host)
};

}  // namespace magi2
