// Parameter structs of the Qwen3.5 text encoder ops (Backend in ops.h). The
// conventions of ops.h apply (callers pass every output; row-strided 2-D
// views; fixed accumulation order). Included by ops.h; include ops.h, not
// this file.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace magi2 {

// ---- Qwen3.5 text encoder ops (official Qwen35TextEncoder on the CPU in bf16:
// transformers Qwen3_5TextModel with its PyTorch fallbacks). Each takes bf16
// operands (the official path; rounding points in the docstring) or, for the
// fp32 reference mode, f32 operands throughout (no rounding). ----

/// Causal depthwise conv1d (kernel K, left zero padding K-1) along the rows,
/// optionally followed by SiLU: y[t, c] = sum_k w[c, k] x[t-K+1+k, c].
/// x [L, C] (row-strided ok), w [C, K] (conv1d.weight [C, 1, K] squeezed), y [L, C].
/// bf16: y = bf16(silu(bf16(conv))) with fp32 accumulation (torch conv1d, then
/// SiLU on the bf16 result). Source: transformers causal_conv1d_fn fallback.
struct CausalConv1dParams {
  Tensor x;
  Tensor w;
  Tensor y;
  bool silu = true;
};

/// Gated DeltaNet core (transformers torch_chunk_gated_delta_rule, chunked,
/// use_qk_l2norm_in_kernel) with its gates: per value head h (key head
/// h / (Hv/Hk)), beta = sigmoid(b) (bf16-rounded on the bf16 path),
/// g = -exp(a_log) * softplus(a + dt_bias) (fp32); q, k are L2-normalised (eps
/// 1e-6) in fp32, q scaled by dk^-1/2; the recurrence S_t = exp(g_t) S_{t-1} +
/// k_t beta_t (v_t - exp(g_t) S_{t-1}^T k_t)^T, o_t = S_t^T q_t, evaluated in
/// chunks of `chunk_size` rows with the UT transform (fp32 throughout), zero
/// initial state. q, k [L, Hk*dk], v [L, Hv*dv], a, b [L, Hv] (all one dtype,
/// row-strided ok), a_log, dt_bias [Hv] f32 (the parameters' values),
/// o [L, Hv*dv] (rounded once to its dtype).
struct GatedDeltaRuleParams {
  Tensor q, k, v;
  Tensor a, b;
  Tensor a_log, dt_bias;
  Tensor o;
  int num_k_heads = 0;
  int num_v_heads = 0;
  int chunk_size = 64;
};

/// Gated RMSNorm (transformers Qwen3_5RMSNormGated): per d-vector,
/// n = x * rsqrt(mean(x^2) + eps) (fp32), y = (w * n) * silu(z). x, z, y
/// [R, heads*d] (row-strided ok), w [d] f32 (plain gain, no 1+). bf16:
/// y = bf16(bf16(w * bf16(n)) * silu(fp32 z)).
struct GatedRmsNormParams {
  Tensor x, z;
  Tensor w;
  Tensor y;
  int64_t heads = 1;
  float eps = 1e-6f;
};

/// Half-split (NeoX) rotary on the first `rotary_dim` dims of every head, in
/// place (transformers apply_rotary_pos_emb): angle = pos * inv_freq[i]
/// (fp32), x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin. x [T, H*hd]
/// (row-strided ok), inv_freq [rotary_dim/2] f32, position of row t =
/// positions[t] (row index when null). bf16: cos and sin rounded to bf16, each
/// product and the sum rounded to bf16 (torch bf16 element-wise ops).
struct RotaryParams {
  Tensor x;
  Tensor inv_freq;
  int64_t heads = 1;
  int64_t rotary_dim = 0;
  const std::vector<int32_t>* positions = nullptr;
};

/// Causal grouped-query attention without sink (torch SDPA on the CPU,
/// is_causal): query head h reads key/value head h / (H/Hkv). q [T, H*hd],
/// k, v [T, Hkv*hd] (row-strided ok), o [T, H*hd]; scores s = scale q.k in
/// fp32. bf16 follows the CPU flash-attention kernel: keys in blocks of 512
/// with a running max M, p = exp(s - M) in fp32, the row sum of fp32 p, P V
/// with p rounded to bf16 (fp32 accumulation), o = bf16(acc / sum).
struct CausalAttentionParams {
  Tensor q, k, v;
  Tensor o;
  int64_t heads = 1;
  int64_t kv_heads = 1;
  float scale = 0.f;
};

/// out = x * sigmoid(g) element-wise (the gated-attention output gate), all
/// [R, C] (row-strided ok, out may alias x). bf16: bf16(x * bf16(sigmoid(g))).
struct SigmoidMulParams {
  Tensor x, g;
  Tensor out;
};

/// SiLU-gated MLP activation out = silu(gate) * up, all [R, C] (row-strided
/// ok, out may alias either). bf16: bf16(bf16(silu(gate)) * up).
struct SiluMulParams {
  Tensor gate, up;
  Tensor out;
};

}  // namespace magi2
