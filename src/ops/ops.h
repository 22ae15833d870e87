// The op interface every backend implements (CPU reference now, CUDA next).
// Model code calls only these; it holds no loops over tensor data.
//
// Conventions shared by all ops:
// * Ops never allocate their outputs: the caller passes every output tensor,
//   planned once per shape (static shapes per resolution), so a CUDA backend can
//   run a whole denoising step as one graph with no host sync.
// * 2-D operands may be row-strided views (e.g. a column slice of a wider
//   buffer): element (r, c) lives at data + r*strides[0] + c; the column stride
//   must be 1.
// * "bf16(x)" is round-to-nearest-even (spec magi2-dit.md §0.2). Accumulation is
//   fp32; every op's rounding points follow spec §12 column R0 unless its
//   docstring says otherwise.
// * Row groups (`Groups`): rows [cu[m], cu[m+1]) use weight set m (modality
//   VIDEO=0, AUDIO=1, TEXT=2 after the modality permutation, spec §3.9).
// * Results for one row never depend on how many rows are in the call or on
//   the thread count (row-invariant kernels, spec §10.7), so outputs are
//   bit-identical across thread counts and token splits.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace magi2 {

/// Contiguous row groups that select a weight set. `count` = 1 (one set for all
/// rows) or the number of modality sets (3).
struct Groups {
  std::array<int64_t, 4> cu{};  ///< group boundaries, cu[0] = 0, cu[count] = rows
  int count = 1;
  /// One group covering `rows` rows.
  static Groups single(int64_t rows) {
    Groups g;
    g.cu = {0, rows, rows, rows};
    return g;
  }
  int64_t rows() const { return cu[count]; }
  /// The same boundaries multiplied by `k` (e.g. per-head rows = tokens x heads).
  Groups scaled(int64_t k) const {
    Groups g = *this;
    for (auto& c : g.cu) c *= k;
    return g;
  }
};

/// RMSNorm with gain (1 + w): y = cast(x * rsqrt(mean(x^2) + eps) * (w_m + 1)).
/// Spec §4.1. x [R, heads*d] bf16|f32 (row-strided ok): each of the `heads`
/// d-vectors of a row is normalised separately (q/k norms: one weight for all
/// heads), w [G*d] f32 (set m = elements [m*d, (m+1)*d), chosen by the row's
/// group), y [R, heads*d] bf16|f32 (may alias x when dtypes match).
struct RmsNormParams {
  Tensor x;
  Tensor w;
  Tensor y;
  Groups groups;
  int64_t heads = 1;
  float eps = 1e-6f;
};

/// Grouped linear y = x * W_m^T (+ b_m), fp32 accumulation, one rounding to
/// y's dtype. Spec §4.2, §3.8. Either x, W, y all bf16 (GEMM(bf16)) or x, W, y
/// all f32 (fp32 GEMM, optional f32 bias [G*out]). x [R, in] (row-strided ok),
/// W [G*out, in] (modality m = rows [m*out, (m+1)*out)), y [R, out] (row-strided ok).
struct LinearParams {
  Tensor x;
  Tensor w;
  Tensor bias;  ///< optional
  Tensor y;
  Groups groups;
};

/// SwiGLU7 on interleaved pairs (spec §4.3): u [R, 2I] bf16 with g_i = u[2i],
/// l_i = u[2i+1]; z [R, I] bf16 = bf16((min(g,7) * sigmoid(1.702 min(g,7))) *
/// (clamp(l,-7,7) + 1)), fp32 math. Both may be row-strided.
struct SwiGLU7Params {
  Tensor u;
  Tensor z;
};

/// dst[i, :] = src[index[i], :] for 2-D tensors of equal width and dtype
/// (src may be row-strided). index: host vector of source rows.
struct GatherRowsParams {
  Tensor src;
  Tensor dst;
  const std::vector<int32_t>* index = nullptr;
};

/// Element-wise Fourier RoPE table (spec §4.4): coords [T, 9] f32 rows
/// (t,h,w, S_t,S_h,S_w, R_t,R_h,R_w), bands [nb] f32, out [T, 6*nb] f32 =
/// [sin(t bands) | sin(h) | sin(w) | cos(t) | cos(h) | cos(w)].
/// Error if a scale (R-1)/(S-1) is not finite.
struct RopeTableParams {
  Tensor coords;
  Tensor bands;
  Tensor out;
};

/// Half-split (NeoX) rotary on the first 6*nb dims of each head, then bf16
/// (spec §4.5, §6 step 6). x [T, H, hd] f32 (rows in x order), table [T, 6*nb]
/// f32 in output row order, out [T, H, hd] bf16 where out row n reads x row
/// src_rows[n] (identity when src_rows is null): RoPE fused with un-permuting.
struct RopeParams {
  Tensor x;
  Tensor table;
  Tensor out;
  const std::vector<int32_t>* src_rows = nullptr;
};

/// Full (non-causal) varlen attention with one learned sink logit per head
/// (spec §6 step 7, R0): q, k, v [T, H, hd] bf16 in token order; samples are
/// rows [cu_seqlens[b], cu_seqlens[b+1]); p = exp(s*qk) / (sum exp(s*qk) +
/// exp(sink_h)); o [T, H, hd] bf16 = bf16(sum p v) with fp32 softmax and P*V.
/// The sink logit is not scaled. `head_begin` selects the sink of a head slice
/// (Ulysses ranks own heads [head_begin, head_begin + H)).
struct AttentionParams {
  Tensor q, k, v;
  Tensor sinks;  ///< [>= head_begin + H] f32
  Tensor o;
  const std::vector<int32_t>* cu_seqlens = nullptr;
  float scale = 0.f;
  int head_begin = 0;
};

/// Per-head sigmoid output gate (spec §6 step 9), in place:
/// o[n, h, :] = bf16(o * bf16(sigmoid(g[n, h]))). o [T, H, hd] bf16, g [T, H] bf16 (row-strided ok).
struct GateParams {
  Tensor o;
  Tensor g;
};

/// out = bf16(a + b), all [R, C] bf16 (row-strided ok; out may alias a or b);
/// all f32 operands give the fp32 sum (text encoder fp32 reference mode).
struct AddParams {
  Tensor a, b, out;
};

/// Per-branch mHC scalars (spec §9.1): alpha_{pre,post,res} [1] f32,
/// bias_{pre,post} [4] f32, bias_res [4, 4] f32 (row = output stream).
struct MhcBranchWeights {
  Tensor alpha_pre, alpha_post, alpha_res;
  Tensor bias_pre, bias_post, bias_res;
};

/// mHC logits (spec §9.2): n = RMSNorm(state) over the whole 4-stream state
/// (fp32 out, gain 1+w per group), L = n * phi. state [T, 4*D] bf16,
/// norm_w [G*4*D] f32, phi [4*D, 24] f32 (stored [in, out]), logits [T, 24] f32.
struct MhcLogitsParams {
  Tensor state;
  Tensor norm_w;
  Tensor phi;
  Tensor logits;
  Groups groups;
  float eps = 1e-6f;
};

/// mHC branch input (spec §9.3): H_pre = bf16(sigmoid((alpha_pre*c)*L_pre + b_pre)),
/// a = bf16(sum_i H_pre[i] * stream_i). state [T, 4*D] bf16, logits [T, 24] f32,
/// a [T, D] bf16, h_pre (optional out) [T, 4] f32 holding bf16 values.
struct MhcPreParams {
  Tensor state;
  Tensor logits;
  const MhcBranchWeights* w = nullptr;
  Tensor a;
  Tensor h_pre;  ///< optional
  float c = 0.f;  ///< 1/sqrt(4*D) as fp32
};

/// mHC H_post, Sinkhorn H_res and hyper-connection (spec §9.4-9.6), in place on
/// state: S'_i = bf16(bf16(sum_j H_res[i][j] S_j) + bf16(H_post[i] * o)).
/// state [T, 4*D] bf16, o [T, D] bf16, logits [T, 24] f32; optional outputs
/// h_post [T, 4] f32 and h_res [T, 16] f32 (bf16 values).
struct MhcPostResParams {
  Tensor state;
  Tensor o;
  Tensor logits;
  const MhcBranchWeights* w = nullptr;
  Tensor h_post;  ///< optional
  Tensor h_res;   ///< optional
  float c = 0.f;
  int sinkhorn_iters = 20;
  float sinkhorn_eps = 1e-12f;
};

/// Multi-head MoE router (spec §8.2): per MoE head h and token t, fp32 logits
/// l = r_{t,h} * gate[h*E + e, :], s = sigmoid(l), top-k of s + bias (descending,
/// lowest expert id on exact ties), p = s at the chosen experts, w =
/// p / max(sum |p|, 1e-12) * route_scale (L1 step only when `normalize`).
/// r [T, MH*DH] bf16, gate [MH*E, DH] f32, bias [MH*E] f32,
/// idx [MH, T, K] i32 (expert id within the head), weight [MH, T, K] f32.
/// When `forced_idx` [MH, T, K] i32 is given, the selection is taken from it
/// (testing: teacher forcing) and only the weights are computed.
/// margin (optional) [MH, T] f32 = sel_K - sel_{K+1} (flip-proneness).
struct MoeRouteParams {
  Tensor r;
  Tensor gate;
  Tensor bias;
  Tensor idx;
  Tensor weight;
  Tensor forced_idx;  ///< optional
  Tensor margin;      ///< optional
  int num_heads = 0;
  int num_experts = 0;
  int top_k = 0;
  float route_scale = 1.f;
  bool normalize = true;
};

/// Routed experts and their combination (spec §8.3-8.4, official Triton
/// expert kernel in deterministic mode): for each (t, h, k), f = h*E + idx,
/// G = r_{t,h} W_gate[f], U = r_{t,h} W_up[f] (fp32 accumulators),
/// Z = bf16(swiglu7_pair(G, U)), Y = Z W_down[f] (fp32), c = bf16(Y * w);
/// out[t, h*DH:(h+1)*DH] = routes combined in ascending expert id with fp32
/// accumulation and one rounding to bf16. r [T, MH*DH] bf16, W_gate/W_up
/// [MH*E, DH, DE] bf16, W_down [MH*E, DE, DH] bf16, idx/weight as from routing,
/// out [T, MH*DH] bf16. Expert parallel passes a rank's slice of heads and
/// its rows of the expert banks (spec §10.2); the op is per-head independent.
struct MoeExpertsParams {
  Tensor r;
  Tensor w_gate, w_up, w_down;
  Tensor idx;
  Tensor weight;
  Tensor out;
  int num_heads = 0;
  int num_experts = 0;
  int top_k = 0;
};

/// out[:, col_begin : col_begin + src.cols] = src (f32, 2-D, row-strided ok):
/// the time-channel overwrite of spec §3.8.
struct CopyColsParams {
  Tensor src;
  Tensor dst;
  int64_t col_begin = 0;
};

/// dst = cast(src) element-wise (f32 <-> bf16, RNE), both [R, C] (row-strided ok).
struct CastParams {
  Tensor src;
  Tensor dst;
};

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

/// A compute backend. All methods throw Error on bad shapes/dtypes; none
/// allocates device memory for its outputs.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual const char* name() const = 0;

  /// Allocates a tensor on this backend's device (planning time, not per op).
  virtual Tensor alloc(const Shape& shape, DType dtype) = 0;
  /// Sets every byte of t to zero.
  virtual void zero(const Tensor& t) = 0;

  virtual void rms_norm(const RmsNormParams& p) = 0;
  virtual void linear(const LinearParams& p) = 0;
  virtual void swiglu7(const SwiGLU7Params& p) = 0;
  virtual void gather_rows(const GatherRowsParams& p) = 0;
  virtual void rope_table(const RopeTableParams& p) = 0;
  virtual void rope(const RopeParams& p) = 0;
  virtual void attention(const AttentionParams& p) = 0;
  virtual void gate(const GateParams& p) = 0;
  virtual void add(const AddParams& p) = 0;
  virtual void copy_cols(const CopyColsParams& p) = 0;
  virtual void cast(const CastParams& p) = 0;
  virtual void mhc_logits(const MhcLogitsParams& p) = 0;
  virtual void mhc_pre(const MhcPreParams& p) = 0;
  virtual void mhc_post_res(const MhcPostResParams& p) = 0;
  virtual void moe_route(const MoeRouteParams& p) = 0;
  virtual void moe_experts(const MoeExpertsParams& p) = 0;
  virtual void causal_conv1d(const CausalConv1dParams& p) = 0;
  virtual void gated_delta_rule(const GatedDeltaRuleParams& p) = 0;
  virtual void gated_rms_norm(const GatedRmsNormParams& p) = 0;
  virtual void rotary(const RotaryParams& p) = 0;
  virtual void causal_attention(const CausalAttentionParams& p) = 0;
  virtual void sigmoid_mul(const SigmoidMulParams& p) = 0;
  virtual void silu_mul(const SiluMulParams& p) = 0;
};

/// The CPU reference backend (OpenMP over rows). `threads` <= 0: OpenMP default.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

}  // namespace magi2
