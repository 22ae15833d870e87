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
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "ops/codec_params.h"  // codec op params (Wan2.2 VAE, TurboVAE, Oobleck)
#include "ops/text_params.h"   // Qwen3.5 text encoder op params

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

/// Rows of an activation quantised per row and 1 x 128 group along its
/// columns, the FP8 linears' input rule (ops/numerics.h fp8_amax_step,
/// fp8_act_scale, fp8_act_quant; docs/fp8.md): q F8E4M3 [R, C] and scale f32
/// [R, C / 128] (row r's group b at scale[r, b]), both with unit column stride
/// (row-strided ok: column slices at multiples of 128), C a multiple of 128.
/// Written by a producer op beside its bf16 output (RmsNormParams::y8,
/// AttnOutParams::out8, SwiGLU7Params::z8, MoeExpertsParams::out8) and read by
/// the FP8 linears (LinearParams::x8), which then skip their own quantisation
/// pass. Both undefined: none.
struct Fp8Rows {
  Tensor q;
  Tensor scale;
  bool defined() const { return q.defined(); }
};

/// RMSNorm with gain (1 + w): y = cast(x * rsqrt(mean(x^2) + eps) * (w_m + 1)).
/// Spec §4.1. x [R, heads*d] bf16|f32 (row-strided ok): each of the `heads`
/// d-vectors of a row is normalised separately (q/k norms: one weight for all
/// heads), w [G*d] f32 (set m = elements [m*d, (m+1)*d), chosen by the row's
/// group), y [R, heads*d] bf16|f32 (may alias x when dtypes match).
/// Optional y8 (bf16 y, heads == 1): y's bf16 values quantised as Fp8Rows, the
/// bytes quantising y afterwards would give (the next FP8 linear's input).
struct RmsNormParams {
  Tensor x;
  Tensor w;
  Tensor y;
  Groups groups;
  int64_t heads = 1;
  float eps = 1e-6f;
  Fp8Rows y8;
};

/// Grouped linear y = x * W_m^T (+ b_m), fp32 accumulation, one rounding to
/// y's dtype. Spec §4.2, §3.8. Either x, W, y all bf16 (GEMM(bf16)) or x, W, y
/// all f32 (fp32 GEMM, optional f32 bias [G*out]). x [R, in] (row-strided ok),
/// W [G*out, in] (modality m = rows [m*out, (m+1)*out)), y [R, out] (row-strided ok).
///
/// FP8 (W8A8, `--linear-compute fp8`, docs/fp8.md): W F8E4M3 [G*out, in] with
/// `w_scale` f32 [G, ceil(out / 128), ceil(in / 128)] (one scale per 128 x 128
/// block of each modality's [out, in] matrix, w = q * scale), x bf16, y bf16,
/// no bias. x is quantised per row and 1 x 128 group along `in` (ops/numerics.h
/// fp8_act_scale / fp8_act_quant, the W8A8 experts' rule) and y = bf16(sum over
/// K-blocks b of (the fp32 sum of the block's e4m3 x e4m3 products) *
/// (x_scale_b * w_scale_b)), fp32 accumulation.
struct LinearParams {
  Tensor x;
  Tensor w;
  Tensor bias;  ///< optional
  Tensor y;
  Groups groups;
  Tensor w_scale;  ///< FP8 weights only (see above)
  /// Optional with w_scale: x already quantised by its producer (Fp8Rows of x's
  /// bf16 values, e.g. RmsNormParams::y8). It must be exactly x's quantisation;
  /// a backend may use it instead of quantising x (CUDA) or ignore it (CPU):
  /// the same bytes either way. Ignored by bf16 linears.
  Fp8Rows x8;
};

/// SwiGLU7 on interleaved pairs (spec §4.3): u [R, 2I] bf16 with g_i = u[2i],
/// l_i = u[2i+1]; z [R, I] bf16 = bf16((min(g,7) * sigmoid(1.702 min(g,7))) *
/// (clamp(l,-7,7) + 1)), fp32 math. Both may be row-strided. Optional z8: z's
/// bf16 values as Fp8Rows (the next FP8 linear's input).
struct SwiGLU7Params {
  Tensor u;
  Tensor z;
  Fp8Rows z8;
};

/// dst[i, :] = src[index[i], :] for 2-D tensors of equal width and dtype
/// (src may be row-strided). index [rows] i32, contiguous, on the backend's
/// device like src and dst (device index tensors keep a captured step free of
/// host reads). The CPU backend rejects an index outside [0, src rows); the
/// CUDA backend cannot check without a host sync and writes zeros for such a row.
struct GatherRowsParams {
  Tensor src;
  Tensor dst;
  Tensor index;
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
/// src_rows[n] (identity when src_rows is undefined): RoPE fused with
/// un-permuting. src_rows [T] i32 on the backend's device (bounds as gather_rows).
struct RopeParams {
  Tensor x;
  Tensor table;
  Tensor out;
  Tensor src_rows;  ///< optional
};

/// Full (non-causal) varlen attention with one learned sink logit per head
/// (spec §6 step 7, R0): q, k, v [T, H, hd] bf16 in token order; samples are
/// rows [cu_seqlens[b], cu_seqlens[b+1]); p = exp(s*qk) / (sum exp(s*qk) +
/// exp(sink_h)); o [T, H, hd] bf16 = bf16(sum p v) with fp32 softmax and P*V.
/// The sink logit is not scaled. `head_begin` selects the sink of a head slice
/// (Ulysses ranks own heads [head_begin, head_begin + H)). cu_seqlens [B+1]
/// i32 on the backend's device (0 = cu[0] <= ... <= cu[B] = T); max_seqlen is
/// the host-known bound on cu[b+1] - cu[b] (static per request shape: the CUDA
/// backend sizes its grid and plans by it; 0 means T). The CPU backend checks
/// the boundaries; the CUDA backend cannot without a host sync.
///
/// Deferred sink (`lse` given, [T, H] f32 contiguous): o is then the plain
/// attention output bf16(sum e^(s qk - m) v / l) WITHOUT the sink factor (the
/// FA3 output of the official path) and lse[t, h] = m + log(l), the fp32
/// natural-log sum of exp(s qk) over the sample's keys; `sinks` is not read.
/// attn_out applies the sink afterwards at the official rounding point, so
/// attention(lse) + attn_out gives the bytes of attention() + gather_rows + gate.
struct AttentionParams {
  Tensor q, k, v;
  Tensor sinks;  ///< [>= head_begin + H] f32
  Tensor o;
  Tensor cu_seqlens;
  int64_t max_seqlen = 0;
  float scale = 0.f;
  int head_begin = 0;
  Tensor lse;  ///< optional [T, H] f32 output: defer the sink to attn_out
  /// FP8 attention (docs/fp8.md; an experiment, off by default): e4m3 Q, K, V
  /// and P with the scales of kFp8AttnTile's comment, fp32 scores, softmax
  /// and accumulation, bf16 o. Needs `lse`; CUDA needs head dim 128. The CPU
  /// backend emulates its rounding points at any head dim
  /// (cpu/attention_fp8.cpp); CUDA runs the own flash kernel in FP8
  /// (attention_flash.h). --attention-compute fp8 sets it for the DiT.
  bool fp8 = false;
  /// With fp8: this call's q, k, v went through attn_qkv with AttnQkvParams::fp8
  /// just before (same stream, no other FP8 attention between), so CUDA takes the FP8 operands
  /// that call wrote and skips its own quantisation; the CPU quantises q, k, v as
  /// without it (the same bytes either way).
  bool fp8_from_qkv = false;
};

/// Block-sparse (range-list) attention, the refiner's window attention
/// (official MagiAttention flex_flash_attn_func with full-type ranges; docs/refiner.md §5):
/// query row i attends to the union of k_ranges[p] over the pairs p whose
/// q_ranges[p] holds i; o = bf16(softmax(scale q k^T) v) over those keys with
/// fp32 softmax and P*V (the bytes of `attention` without a sink when the keys
/// are one contiguous range). q [T, Hq, hd], k, v [T, Hkv, hd], o [T, Hq, hd]
/// bf16 contiguous, Hq a multiple of Hkv (kv head j serves q heads
/// [j*Hq/Hkv, (j+1)*Hq/Hkv)). q_ranges, k_ranges [P, 2] i32 half-open token
/// ranges, host tensors (the layout is static per request shape); two q ranges
/// are either equal or disjoint, and the k ranges of one q range never
/// overlap (what the refiner's builder makes; checked). A row no pair covers
/// gets zeros. Errors name the offending argument.
struct BlockSparseAttentionParams {
  Tensor q, k, v;
  Tensor o;
  Tensor q_ranges, k_ranges;
  float scale = 0.f;
};

/// Attention producer after the qkv GEMM (spec §6 steps 4-6), one op:
/// for output (token-order) row n and source row s = src_rows[n] of qkv
/// (modality order), per head h:
///   q[n, h, :] = bf16(rope(f32 RMSNorm(qkv[s, q head h]) * (1 + q_norm_m), table[n]))
///   k[n, h, :] likewise with the k columns and k_norm,
///   v[n, :, :] = qkv[s, v columns],
/// where m is row s's group. Bytes equal rms_norm(heads=H, f32 out) + rope
/// (src_rows) for q and k and gather_rows for v (the CPU backend runs exactly
/// that sequence). qkv [R, 3*H*hd] bf16 (row-strided ok; q | k | v column
/// blocks), q_norm / k_norm [G*hd] f32, table [R, 6*nb] f32 in token order
/// (6*nb <= hd), src_rows [R] i32 on the backend's device (a permutation),
/// q, k, v [R, H, hd] bf16 contiguous. hd, H are taken from q.
struct AttnQkvParams {
  Tensor qkv;
  Tensor q_norm, k_norm;
  Tensor table;
  Tensor src_rows;
  Tensor q, k, v;
  Groups groups;  ///< row groups of qkv (modality order)
  float eps = 1e-6f;
  /// FP8 attention follows (AttentionParams::fp8 and fp8_from_qkv on the same
  /// q, k, v, with these cu_seqlens [nseq+1] i32 on the backend's device): CUDA
  /// then makes that call's e4m3 operands and scales instead, and leaves q, k
  /// and v unwritten (one kernel, no bf16 pass over them; needs head dim 128);
  /// the CPU writes q, k, v as without it.
  bool fp8 = false;
  Tensor cu_seqlens;
};

/// Attention consumer before the output projection (spec §6 steps 7-9), one op:
/// for output (modality-order) row n, head h, with r = src_rows[n]:
///   c = bf16(o[r, h, :] * exp(lse[r, h] - logaddexp(lse[r, h], sink_h)))  if lse is given
///   c = o[r, h, :]                                                         otherwise
///   out[n, h, :] = bf16(c * bf16(sigmoid(g[n, h])))
/// sink_h = sinks[head_begin + h] (not scaled). Bytes equal the sink factor of
/// attention() (lse given) + gather_rows(src_rows) + gate. o [T, H, hd] bf16
/// contiguous (token order), lse [T, H] f32 (attention's deferred-sink output),
/// g [T, H] bf16 (row-strided ok, modality order), src_rows [T] i32 on the
/// backend's device, out [T, H, hd] bf16 contiguous (must not alias o).
/// Optional out8: out's bf16 values as Fp8Rows of [T, H*hd] (the output
/// projection's FP8 input; CUDA needs hd == 128: one group a head).
struct AttnOutParams {
  Tensor o;
  Tensor lse;    ///< optional
  Tensor sinks;  ///< [>= head_begin + H] f32; read only with lse
  int head_begin = 0;
  Tensor g;
  Tensor src_rows;
  Tensor out;
  Fp8Rows out8;
};

/// Per-head sigmoid output gate (spec §6 step 9), in place:
/// o[n, h, :] = bf16(o * bf16(sigmoid(g[n, h]))). o [T, H, hd] bf16, g [T, H] bf16 (row-strided ok).
struct GateParams {
  Tensor o;
  Tensor g;
};

/// out = bf16(a + b), all [R, C] bf16, or out = a + b in fp32 with all three
/// f32 (Wan2.2 encoder, text encoder fp32 reference mode; row-strided ok; out
/// may alias a or b). Optional c (bf16 only, [R, C]): out = bf16(a + bf16(b +
/// c)), the bytes of add(b, c) then add(a, that) in one pass (the MoE's shared
/// + modality-shared experts' sum added to the merged routed output).
struct AddParams {
  Tensor a, b, out;
  Tensor c;  ///< optional
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
/// ss (optional) [T] f32: each state row's sum of squares as the mhc_post_res
/// that wrote the state made it (MhcPostResParams::ss); a backend may take
/// the RMSNorm's sums from it instead of reading the state twice (the CUDA
/// backend's fused path does; the CPU backend sums itself).
struct MhcLogitsParams {
  Tensor state;
  Tensor norm_w;
  Tensor phi;
  Tensor logits;
  Groups groups;
  float eps = 1e-6f;
  Tensor ss;  ///< optional
};

/// mHC branch input (spec §9.3): H_pre = bf16(sigmoid((alpha_pre*c)*L_pre + b_pre)),
/// a = bf16(sum_i H_pre[i] * stream_i). state [T, 4*D] bf16, logits [T, 24] f32,
/// a [T, D] bf16, h_pre (optional out) [T, 4] f32 holding bf16 values.
///
/// norm (optional, when norm.y is defined): the branch's pre-norm (spec §6
/// step 1, §7, §8.1) on a's rows as well, norm.x ignored: the bytes of
/// rms_norm(mhc_pre_norm(p)) after the pre-mix, so a backend may keep a in
/// on-chip memory (the CUDA backend's fast path: one pass instead of a
/// written and read back). With it `a` may be left undefined: the pre-mix then
/// goes through norm.y (normalised in place) and a is not kept.
struct MhcPreParams {
  Tensor state;
  Tensor logits;
  const MhcBranchWeights* w = nullptr;
  Tensor a;
  Tensor h_pre;  ///< optional
  float c = 0.f;  ///< 1/sqrt(4*D) as fp32
  RmsNormParams norm;  ///< optional: bf16 y [T, D] (and y8), w [G*D] f32, groups, heads 1
};

/// The rows mhc_pre's pre-mix writes: a, or norm.y when a is omitted.
inline const Tensor& mhc_pre_rows(const MhcPreParams& p) { return p.a.defined() ? p.a : p.norm.y; }

/// The pre-norm that mhc_pre with norm.y defined runs: p.norm reading mhc_pre_rows(p).
inline RmsNormParams mhc_pre_norm(const MhcPreParams& p) {
  RmsNormParams n = p.norm;
  n.x = mhc_pre_rows(p);
  return n;
}

/// mHC H_post, Sinkhorn H_res and hyper-connection (spec §9.4-9.6), in place on
/// state: S'_i = bf16(bf16(sum_j H_res[i][j] S_j) + bf16(H_post[i] * o)).
/// state [T, 4*D] bf16, o [T, D] bf16, logits [T, 24] f32; optional outputs
/// h_post [T, 4] f32 and h_res [T, 16] f32 (bf16 values), and ss [T] f32:
/// the sum of squares of each new state row (fp32, in a backend's own order),
/// for the next branch's mhc_logits (MhcLogitsParams::ss).
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
  Tensor ss;  ///< optional
  /// Optional, when next.logits is defined: the next branch's logits of the
  /// new state, mhc_logits({state, next.norm_w, next.phi, next.logits,
  /// next.groups, next.eps}) (next.state and next.ss are ignored). A backend
  /// may form them in the same pass as the update (the CUDA backend's fused
  /// path: the state is read once less a boundary), held to mhc_logits' bound
  /// rather than to its bytes. next.logits may be `logits` itself: it is
  /// written only after `logits` has been read.
  MhcLogitsParams next;
};

/// The mhc_logits that MhcPostResParams::next asks for: p.next on p's (new) state.
inline MhcLogitsParams mhc_next_logits(const MhcPostResParams& p) {
  MhcLogitsParams n = p.next;
  n.state = p.state;
  n.ss = Tensor();
  return n;
}

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
/// FP8 experts (W8A16, docs/fp8.md): the three banks are F8E4M3 with their
/// `_scale_inv` block scales (ops/fp8_blocks.h); every weight is then used as
/// bf16(q * scale), so the result equals the bf16 op on those dequantised banks.
/// With fp8_compute = W8A8 the activations are FP8 too: the gathered rows r and
/// Z are quantised to e4m3 per 1 x 128 group along K (ops/numerics.h
/// fp8_act_scale / fp8_act_quant), and each GEMM output is the sum over its
/// K-blocks of (the fp32 sum of e4m3 x e4m3 products) * (a_scale * w_scale),
/// fp32 accumulation; the other rounding points are W8A16's. Ignored for bf16 banks.
enum class Fp8Compute {
  W8A16,  ///< FP8 weights, bf16 activations (default)
  W8A8,   ///< FP8 weights and FP8 activations (1 x 128 groups)
};
/// How the bytes of the routed expert banks are laid out (MoeExpertsParams::
/// bank_layout). Block scales keep the checkpoint's shape in either layout.
enum class ExpertBankLayout {
  /// The official [K, N] per expert: W_gate/W_up [MH*E, DH, DE], W_down [MH*E, DE, DH].
  Checkpoint,
  /// FP8 banks in the CUDA W8A8 kernel's K-major layout (Backend::moe_prepare_banks,
  /// docs/fp8.md): W_gate/W_up [MH*E, DE, DH] (each expert's bank transposed),
  /// W_down [MH*E, DH, DE] with each 32 columns of a row in fp8_vt_key order
  /// (cuda/fp8_fragment.cuh). Only that backend's W8A8 path reads it.
  KMajorW8a8,
};
struct MoeExpertsParams {
  Tensor r;
  Tensor w_gate, w_up, w_down;
  Tensor w_gate_scale, w_up_scale, w_down_scale;  ///< FP8 banks only: f32 block scales
  Tensor idx;
  Tensor weight;
  Tensor out;
  int num_heads = 0;
  int num_experts = 0;
  int top_k = 0;
  Fp8Compute fp8_compute = Fp8Compute::W8A16;  ///< FP8 banks only (--fp8-compute)
  ExpertBankLayout bank_layout = ExpertBankLayout::Checkpoint;  ///< of w_gate, w_up, w_down
  Fp8Rows out8;  ///< optional: out's bf16 values as Fp8Rows (the merge linear's FP8 input)
};

/// d_expert (DE) of p's routed expert banks in either layout; 0 when w_gate is not 3-D.
inline int64_t moe_expert_width(const MoeExpertsParams& p) {
  if (p.w_gate.dim() != 3) return 0;
  return p.bank_layout == ExpertBankLayout::KMajorW8a8 ? p.w_gate.size(1) : p.w_gate.size(2);
}

/// out[:, col_begin : col_begin + src.cols] = src (f32, 2-D, row-strided ok):
/// the time-channel overwrite of spec §3.8.
struct CopyColsParams {
  Tensor src;
  Tensor dst;
  int64_t col_begin = 0;
};

/// dst = src, byte for byte, across devices (host <-> device, device <-> device,
/// host <-> host): same dtype and shape, each contiguous or 2-D row-strided
/// (unit column stride). A copy into host memory has completed when the call
/// returns (the only op that waits for the device); a copy from host memory
/// has read its source when the call returns, so the source may be reused.
struct CopyParams {
  Tensor src;
  Tensor dst;
};

/// dst = cast(src) element-wise (f32 <-> bf16, RNE), both [R, C] (row-strided ok).
struct CastParams {
  Tensor src;
  Tensor dst;
};

// ---- Sampler ops: the per-step work of the denoising loop around the DiT
// (spec pipeline §4-5), so a whole step stays on the backend's device. Index
// maps and tables are built on the host once per request shape; the step index
// lives in a device counter (i32 [1]) that advance_step increments, so one
// recorded step replays for every step of the schedule. ----

/// dst.flat[dst_index[i]] = src.flat[src_index[i]] for i < n (f32; src and dst
/// contiguous, any shape): latents scattered into token rows and the DiT output
/// gathered back (spec pipeline §4.2, §4.6). src_index, dst_index [n] i32 on the
/// backend's device; an undefined index is the identity (i). The CPU backend
/// rejects indices outside src/dst; the CUDA backend skips such elements.
struct CopyElemsParams {
  Tensor src;
  Tensor dst;
  Tensor src_index;  ///< optional (identity)
  Tensor dst_index;  ///< optional (identity)
};

/// out[rows[i], :] = table[step[0], :]: the time channels of the noisy tokens for
/// the current step (spec pipeline §4.5). table [S, C] f32 (one sinusoidal
/// embedding per step), step [1] i32 device counter, rows [n] i32, out [N, C] f32,
/// all contiguous on the backend's device.
struct FillRowsParams {
  Tensor table;
  Tensor step;
  Tensor rows;
  Tensor out;
};

/// Classifier-free guidance (spec pipeline §5.4, numerics.h cfg_combine_f32):
/// v[k] = uncond + f32(scale) * (cond - uncond) with pred [2, n] f32 (row 0 the
/// conditional branch, row 1 the unconditional), v [n] f32, contiguous.
struct CfgCombineParams {
  Tensor pred;
  Tensor v;
  float scale = 1.f;
};

/// One FlowUniPC solver step in place (spec pipeline §5.3, numerics.h
/// flow_unipc_element) with the scalars of row step[0] of `coef`: sample, last,
/// m0, m1 [n] f32 (solver state, zero before step 0), v [n] f32 (the guided
/// velocity), coef [S, 16] f32 (FlowUniPC::step_table), step [1] i32.
struct FlowUniPCStepParams {
  Tensor sample;
  Tensor v;
  Tensor last;
  Tensor m0;
  Tensor m1;
  Tensor coef;
  Tensor step;
};

/// step[0] += 1: the device step counter the sampler ops read (i32 [1]).
struct AdvanceStepParams {
  Tensor step;
};

/// Non-finite detection without a host sync: when any element of x (f32,
/// contiguous) is NaN or +-inf, first[slot] = min(first[slot], step[0]). first
/// [>slot] i32 (start it at INT32_MAX), step [1] i32. Read once at the end.
struct NonfiniteCheckParams {
  Tensor x;
  Tensor first;
  Tensor step;
  int slot = 0;
};

/// A recorded step of ops: Backend::capture makes one, launch() re-runs it.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  /// Enqueues the recorded ops again (CUDA: one cudaGraphLaunch; CPU: the body in order).
  virtual void launch() = 0;
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
  /// Copies between devices (see CopyParams); the way tensors move to and from the device.
  virtual void copy(const CopyParams& p) = 0;
  /// Host-to-device copies of many tensors at once (weight upload): the CUDA
  /// backend stages them through pinned buffers from several threads. Default:
  /// copy() each in turn.
  /// `progress` (optional) gets bytes done and in all as the copies proceed.
  virtual void copy_many(const std::vector<CopyParams>& ps,
                         const std::function<void(size_t done, size_t total)>& progress = {}) {
    size_t total = 0, done = 0;
    for (const CopyParams& p : ps) total += p.src.nbytes();
    for (const CopyParams& p : ps) {
      copy(p);
      if (progress) progress(done += p.src.nbytes(), total);
    }
  }
  /// Waits until every op enqueued so far has finished (no-op on the CPU).
  virtual void synchronize() {}
  /// Profiling hook: the ops enqueued from now on belong to `region` (a
  /// static string, e.g. "attn.core") until the next mark. Backends that
  /// profile (cuda_profile_begin) time regions with events; otherwise a no-op.
  virtual void mark(const char* region) {}
  /// Records `body`, which must only enqueue ops on this backend over buffers
  /// that outlive the graph, as one replayable step. CUDA: captured once as a
  /// CUDA graph in cudaStreamCaptureModeGlobal, so a host sync, an allocation or
  /// a pageable host copy inside `body` fails the capture with an Error naming
  /// it; run `body` once eagerly first so plans and workspaces exist. CPU: keeps
  /// `body` and runs it on each launch.
  virtual std::unique_ptr<StepGraph> capture(std::function<void()> body);

  virtual void rms_norm(const RmsNormParams& p) = 0;
  virtual void linear(const LinearParams& p) = 0;
  virtual void swiglu7(const SwiGLU7Params& p) = 0;
  virtual void gather_rows(const GatherRowsParams& p) = 0;
  virtual void rope_table(const RopeTableParams& p) = 0;
  virtual void rope(const RopeParams& p) = 0;
  virtual void attention(const AttentionParams& p) = 0;
  virtual void attn_qkv(const AttnQkvParams& p) = 0;
  /// Default: Error naming the backend (only the CPU backend implements it today).
  virtual void block_sparse_attention(const BlockSparseAttentionParams& p);
  virtual void attn_out(const AttnOutParams& p) = 0;
  virtual void gate(const GateParams& p) = 0;
  virtual void add(const AddParams& p) = 0;
  virtual void copy_cols(const CopyColsParams& p) = 0;
  virtual void cast(const CastParams& p) = 0;
  virtual void mhc_logits(const MhcLogitsParams& p) = 0;
  virtual void mhc_pre(const MhcPreParams& p) = 0;
  virtual void mhc_post_res(const MhcPostResParams& p) = 0;
  virtual void moe_route(const MoeRouteParams& p) = 0;
  virtual void moe_experts(const MoeExpertsParams& p) = 0;
  /// A scheduling hint, no numerics: the routed expert banks of `p` (w_* and
  /// their scales, fp8_compute; the other fields unused) will reach
  /// moe_experts soon, after the ops enqueued next. The CUDA backend starts
  /// dequantising FP8 banks (W8A16) on a side stream beside those ops (the
  /// attention core), and moe_experts with the same banks joins it; a
  /// moe_experts call must follow before a capture ends. Default: nothing.
  virtual void moe_prefetch(const MoeExpertsParams& p) {}
  /// A load-time layout choice, no numerics: rewrites the routed expert banks
  /// of `p` (w_gate, w_up, w_down on this device, their scales, fp8_compute)
  /// into the layout this backend's moe_experts reads fastest and sets
  /// p.bank_layout, replacing the three tensors (the old ones are freed when
  /// the caller drops them). Call once per bank, before any step, with
  /// p.bank_layout = Checkpoint. The CUDA backend: FP8 banks with W8A8 compute at
  /// the fused kernel's widths become KMajorW8a8, so no call transposes them
  /// again (docs/fp8.md). Default: nothing. Error when the device cannot hold
  /// the new bank beside the old one.
  virtual void moe_prepare_banks(MoeExpertsParams& p) {}
  // Audio codec (Stable Audio Open VAE decoder)
  virtual void conv1d(const Conv1dParams& p) = 0;
  virtual void conv_transpose1d(const ConvTranspose1dParams& p) = 0;
  virtual void snake_beta(const SnakeBetaParams& p) = 0;
  // Video codecs (TurboVAE decoder; conv3d is shared with the Wan2.2 VAE)
  virtual void conv3d(const Conv3dParams& p) = 0;
  virtual void activation(const ActivationParams& p) = 0;
  virtual void upsample_nearest(const UpsampleNearestParams& p) = 0;
  virtual void channels_to_time(const ChannelsToTimeParams& p) = 0;
  virtual void unpatchify(const UnpatchifyParams& p) = 0;
  virtual void latent_denorm(const LatentDenormParams& p) = 0;
  virtual void frames_to_u8(const FramesToU8Params& p) = 0;
  // Wan2.2 VAE encoder (fp32)
  virtual void channel_l2_norm(const ChannelL2NormParams& p) = 0;
  virtual void avg_down3d(const AvgDown3dParams& p) = 0;
  virtual void spatial_attention(const SpatialAttentionParams& p) = 0;
  virtual void channel_affine(const ChannelAffineParams& p) = 0;
  // Qwen3.5 text encoder
  virtual void causal_conv1d(const CausalConv1dParams& p) = 0;
  virtual void gated_delta_rule(const GatedDeltaRuleParams& p) = 0;
  virtual void gated_rms_norm(const GatedRmsNormParams& p) = 0;
  virtual void rotary(const RotaryParams& p) = 0;
  virtual void causal_attention(const CausalAttentionParams& p) = 0;
  virtual void sigmoid_mul(const SigmoidMulParams& p) = 0;
  virtual void silu_mul(const SiluMulParams& p) = 0;
  // Sampler (the denoising loop around the DiT)
  virtual void copy_elems(const CopyElemsParams& p) = 0;
  virtual void fill_rows(const FillRowsParams& p) = 0;
  virtual void cfg_combine(const CfgCombineParams& p) = 0;
  virtual void flow_unipc_step(const FlowUniPCStepParams& p) = 0;
  virtual void advance_step(const AdvanceStepParams& p) = 0;
  virtual void nonfinite_check(const NonfiniteCheckParams& p) = 0;
};

/// A contiguous copy of `t` (any device) on `be`'s device, allocated with
/// be.alloc: how host data (weights, index vectors, inputs) reaches a backend.
/// Returns `t` itself when it is already a contiguous tensor on that device.
Tensor to_backend(Backend& be, const Tensor& t);

/// Replaces every defined tensor of `tensors` that is not on `be`'s device by a
/// contiguous copy there (be.alloc, one copy_many): a model's weight upload.
/// Error naming `what` when the backend cannot allocate one.
void to_backend_in_place(Backend& be, const std::vector<Tensor*>& tensors, const char* what);

/// A contiguous host copy of `t` (waits for the device); `t` itself when it is
/// already a contiguous host tensor.
Tensor to_host(Backend& be, const Tensor& t);

/// The CPU reference backend (OpenMP over rows). `threads` 0: OpenMP default
/// (all cores). Error ("--threads must be in [0, 1024] ...") outside [0, 1024],
/// the range of every --threads flag: OpenMP itself fails hard when asked for
/// vastly more threads than it can create.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

}  // namespace magi2
