// Activation buffers of one DiT forward, planned once per token count
// (spec magi2-dit.md §5 shapes). Internal to the model.
#pragma once

#include <functional>
#include <vector>

#include "models/magi2_dit/config.h"
#include "ops/ops.h"

namespace magi2 {

/// Every activation of a forward, allocated once for N tokens on the backend as
/// one buffer. Layer temporaries are shared by all layers (one layer runs at a
/// time), and phases that never overlap share one scratch region: the adapters'
/// h0 and fin, and a layer's attention, dense-MLP and MoE temporaries (the
/// largest phase sizes it). The mHC streams, the branch input/output, the
/// routing and the inputs/outputs are never shared. At 540p (115,888 tokens)
/// this takes 11 GB instead of 33 GB.
class DitWorkspace {
 public:
  /// fp8_rows: the linears are FP8 (`--linear-compute fp8`), so xn8 is
  /// carved too (when the hidden size is a multiple of 128).
  DitWorkspace(const DitArch& a, int64_t n, int64_t c_pad, Backend& be, bool fp8_rows = false);

  /// Bytes the workspace for N tokens of width C_pad takes (what `bytes` will
  /// be), computed from the same layout without allocating (memory plan).
  static size_t planned_bytes(const DitArch& a, int64_t n, int64_t c_pad, bool fp8_rows = false);

  int64_t n = 0;
  // Token layout of the request shape, built once by Dit::prepare (spec §3.9).
  std::vector<int32_t> modality_host;  ///< [N] the modality vector it was built from
  std::vector<int32_t> cu_host;        ///< [B+1] sample boundaries it was built from
  Tensor perm;       ///< [N] i32 on the backend: permuted row i holds original token perm[i]
  Tensor inv;        ///< [N] i32 on the backend: original token n sits at permuted row inv[n]
  Tensor cu_seqlens; ///< [B+1] i32 on the backend
  int64_t max_seqlen = 0;  ///< longest sample
  Groups groups3;              ///< video / audio / text row ranges (permuted order)
  Groups groups1;              ///< one group of all rows

  // Inputs staged on the backend when the caller passes host tensors: made by
  // Dit::forward on the first such call, not counted in `bytes`.
  Tensor x_in;       ///< [N, C_pad] f32
  Tensor coords_in;  ///< [N, 9] f32
  Tensor temb_in;    ///< [N, 64] f32

  Tensor x_p;        ///< [N, C_pad] f32 inputs, permuted
  Tensor temb_p;     ///< [N, 64] f32 time channels, permuted
  Tensor rope;       ///< [N, 6*nb] f32, original order
  Tensor h0;         ///< [N, 4D] f32 pre-adapter output
  Tensor state;      ///< [N, 4D] bf16 mHC residual streams (permuted)
  Tensor logits;     ///< [N, 24] f32 mHC logits
  Tensor ss;         ///< [N] f32 the state rows' sums of squares: mhc_post_res -> the next mhc_logits
  bool ss_fresh = false;  ///< ss holds the current state's sums (false until a layer's first post + residual)
  bool logits_fresh = false;  ///< logits hold the current state's (the previous post + residual formed them)
  Tensor h_pre;      ///< [N, 4] f32
  Tensor h_post;     ///< [N, 4] f32
  Tensor h_res;      ///< [N, 16] f32
  Tensor branch_in;  ///< [N, D] bf16
  Tensor branch_out; ///< [N, D] bf16
  Tensor xn;         ///< [N, D] bf16 pre-norm output
  /// xn's FP8 rows (RmsNormParams::y8) for the FP8 linears that read xn (qkv,
  /// split, shared fc1s, dense up), then o_p's (AttnOutParams::out8) for the
  /// output projection, routed's (MoeExpertsParams::out8) for the merge: [N, D]
  /// e4m3 + [N, D / 128] f32, right after xn in every phase. Undefined unless
  /// fp8_rows and D % 128 == 0.
  Fp8Rows xn8;
  // attention
  Tensor g;          ///< [N, H] bf16 gate logits
  Tensor qkv;        ///< [N, 3D] bf16
  Tensor lse;        ///< [N, H] f32 attention log-sum-exp (token order), the deferred sink's input
  Tensor q, k, v;    ///< [N, H, hd] bf16 (original order)
  Tensor o;          ///< [N, H, hd] bf16 attention output (original order)
  Tensor o_p;        ///< [N, H, hd] bf16 (permuted)
  // dense MLP
  Tensor u;          ///< [N, 2I] bf16
  Tensor z;          ///< [N, I] bf16
  // MoE
  Tensor r;          ///< [N, D] bf16 split_linear output (= MoE heads)
  Tensor routed;     ///< [N, D] bf16
  Tensor merged;     ///< [N, D] bf16
  Tensor su;         ///< [N, 2*(Ish+Im)] bf16 shared fc1 outputs
  Tensor sz;         ///< [N, Ish+Im] bf16
  /// sz's FP8 rows (SwiGLU7Params::z8) for the shared experts' fc2s: xn8's bytes
  /// as [N, Ish+Im] e4m3 + [N, (Ish+Im) / 128] f32 (xn8 is dead by then; the
  /// routed experts' out8 follows in xn8 itself). Undefined unless xn8 is
  /// defined and Ish+Im is a multiple of 128 no wider than D.
  Fp8Rows sz8;
  Tensor s2, m2;     ///< [N, D] bf16
  Tensor topk_idx;   ///< [MH, N, K] i32
  Tensor topk_w;     ///< [MH, N, K] f32
  Tensor margin;     ///< [MH, N] f32
  Tensor forced;     ///< [MH, N, K] i32 forced selection, permuted
  // post-adapter
  Tensor fin;        ///< [N, 4D] f32 final norm output
  Tensor out_p;      ///< [N, 64] f32 (permuted)
  Tensor out;        ///< [N, 64] f32 (original order): what forward returns

  /// Bytes of the one buffer the views above live in (the arena a step needs).
  size_t bytes = 0;

 private:
  using Alloc = std::function<Tensor(const Shape&, DType)>;
  DitWorkspace(const DitArch& a, int64_t n, int64_t c_pad, const Alloc& alloc, bool fp8_rows);
};

}  // namespace magi2
