// The entries of the backend op table (ops_table.h). Shapes follow the DiT
// (spec magi2-dit.md: D = 3072, 24 heads x 128, I = 8192, 16 RoPE bands per
// axis, 4 mHC streams, MoE heads of d_head 256) and the sampler ops of the
// device-resident step; "2048 tokens" is the release width where the CPU
// reference stays cheap. Tolerances are the ones stated by
// tests/cuda/test_cuda_{backend,attention,mhc_moe,moe_grouped,dit_step,fused}.cpp.
#include "ops_table.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_common.h"
#include "cuda/fused_kernels.h"
#include "cuda/mhc_moe.h"
#include "cuda_fixture.h"
#include "models/magi2_refiner/tokens.h"
#include "ops/fp8_blocks.h"
#include "ops/numerics.h"
#include "pipeline/flow_unipc.h"

namespace magi2::test {

Tensor CaseBuilder::uniform(const Shape& shape, DType dt, float lo, float hi) {
  Tensor t = Tensor::empty(shape, dt);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = lo + (hi - lo) * static_cast<float>((next() >> 40) * 0x1p-24);
    if (dt == DType::F32)
      t.data_as<float>()[i] = v;
    else
      t.data_as<uint16_t>()[i] = f32_to_bf16_bits(v);
  }
  return t;
}

uint64_t CaseBuilder::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Tensor CaseBuilder::in(const Tensor& host) {
  c_.bytes += static_cast<double>(host.nbytes());
  Tensor d = be_.alloc(host.shape(), host.dtype());
  be_.copy({.src = host, .dst = d});
  return d;
}

Tensor CaseBuilder::in_i32(const std::vector<int32_t>& v) {
  return in(Tensor::from_i32({static_cast<int64_t>(v.size())}, v));
}

Tensor CaseBuilder::out(const Shape& shape, DType dt) {
  Tensor h = Tensor::empty(shape, dt);
  std::memset(h.data(), 0xff, h.nbytes());
  Tensor d = be_.alloc(shape, dt);
  be_.copy({.src = h, .dst = d});
  c_.bytes += static_cast<double>(h.nbytes());
  c_.outputs.push_back(d);
  return d;
}

Tensor CaseBuilder::out_cols(int64_t rows, int64_t width, DType dt, int64_t begin, int64_t end) {
  Tensor wide = out({rows, width}, dt);
  c_.bytes -= static_cast<double>(wide.nbytes());
  Tensor v = wide.slice_cols(begin, end);
  c_.bytes += static_cast<double>(v.nbytes());
  c_.outputs.back() = v;
  return v;
}

Tensor CaseBuilder::inout(const Tensor& host) {
  Tensor d = in(host);
  c_.bytes += static_cast<double>(host.nbytes());
  c_.outputs.push_back(d);
  return d;
}

namespace {

constexpr DType kBf16 = DType::BF16;
constexpr DType kF32 = DType::F32;

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t v : d) s = s.empty() ? str_cat(v) : str_cat(s, "x", v);
  return s;
}

Groups three_groups(int64_t a, int64_t b, int64_t rows) {
  Groups g;
  g.cu = {0, a, b, rows};
  g.count = 3;
  return g;
}

/// `n` indices drawn from [0, range) (repeats allowed).
std::vector<int32_t> draws(CaseBuilder& b, int64_t n, int64_t range) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& i : v) i = static_cast<int32_t>(b.next() % static_cast<uint64_t>(range));
  return v;
}

/// A permutation of [0, n) (Fisher-Yates on the builder's stream).
std::vector<int32_t> permutation(CaseBuilder& b, int64_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  for (size_t i = p.size(); i > 1; --i) std::swap(p[i - 1], p[b.next() % i]);
  return p;
}

/// Routing [mh, t, k] i32: distinct experts per (head, token), a repeated one every 17th pair.
Tensor routing(CaseBuilder& b, int mh, int64_t t, int ne, int k) {
  Tensor idx = Tensor::empty({mh, t, k}, DType::I32);
  for (int64_t i = 0; i < mh * t; ++i) {
    const std::vector<int32_t> p = permutation(b, ne);
    std::copy(p.begin(), p.begin() + k, idx.data_as<int32_t>() + i * k);
    if (i % 17 == 5) idx.data_as<int32_t>()[i * k + 1] = idx.data_as<int32_t>()[i * k];
  }
  return idx;
}

OpEntry rms_norm_entry(int64_t t, int64_t d, int64_t heads, bool slice, bool f32_out = false) {
  const std::string s = dims({t, heads * d}) + (heads > 1 ? " f32 col-slice -> bf16, " + std::to_string(heads) +
                                                                 " heads, 3 groups"
                                                           : f32_out ? " bf16 -> f32, 3 groups"
                                                                     : " bf16 -> bf16, 3 groups");
  return {"rms_norm", s, exact(), 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const int64_t w = heads * d, wide = slice ? 3 * w : w;
            Tensor xs = b.in(b.uniform({t, wide}, slice ? kF32 : kBf16, -5.f, 5.f));
            Tensor x = slice ? xs.slice_cols(w, 2 * w) : xs;
            Tensor wt = b.in(b.uniform({3 * d}, kF32, -0.17f, 0.17f)), y = b.out({t, w}, f32_out ? kF32 : kBf16);
            const RmsNormParams p{.x = x, .w = wt, .y = y, .groups = three_groups(t / 2, t * 3 / 4, t), .heads = heads};
            return b.done([&be, p] { be.rms_norm(p); });
          }};
}

OpEntry linear_entry(int64_t t, int64_t in, int64_t out, int groups, bool f32_bias) {
  const std::string s = dims({t, in}) + " -> " + std::to_string(out) + (f32_bias ? " f32 + bias" : " bf16") +
                        (groups == 3 ? ", 3 groups, into a column slice" : "");
  const Tolerance tol = f32_bias ? rel_rms(1e-6, 1e-4, true) : ulps(1);
  return {"linear", s, tol, 2.0 * t * in * out, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const DType dt = f32_bias ? kF32 : kBf16;
            Tensor x = b.in(b.uniform({t, in}, dt, -1.7f, 1.7f));
            Tensor w = b.in(b.uniform({groups * out, in}, dt, -0.035f, 0.035f));
            Tensor bias = f32_bias ? b.in(b.uniform({out}, kF32, -1.f, 1.f)) : Tensor();
            Tensor y = groups == 3 ? b.out_cols(t, out + 64, dt, 64, 64 + out) : b.out({t, out}, dt);
            const Groups g = groups == 3 ? three_groups(t / 2, t * 6 / 7, t) : Groups::single(t);
            const LinearParams p{.x = x, .w = w, .bias = bias, .y = y, .groups = g};
            return b.done([&be, p] { be.linear(p); });
          }};
}

// FP8 linear (LinearParams::w_scale, `--linear-compute fp8`): the weight
// block-quantised on the host per modality, against the CPU's W8A8 reference;
// the device's blockwise GEMM differs in its fp32 order inside a K-block.
OpEntry linear_fp8_entry(int64_t t, int64_t in, int64_t out, int groups) {
  const std::string s = dims({t, in}) + " -> " + std::to_string(out) + " FP8 W8A8" +
                        (groups == 3 ? ", 3 groups, into a column slice" : "");
  return {"linear", s, rel_rms(4e-3, 0.05), 2.0 * t * in * out, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            Tensor x = b.in(b.uniform({t, in}, kBf16, -1.7f, 1.7f));
            const Tensor w = b.uniform({groups, out, in}, kBf16, -0.035f, 0.035f);
            const Fp8Blocks q = quantize_fp8_blocks(w, "linear.w");
            Tensor y = groups == 3 ? b.out_cols(t, out + 128, kBf16, 128, 128 + out) : b.out({t, out}, kBf16);
            const Groups g = groups == 3 ? three_groups(t / 2, t * 6 / 7, t) : Groups::single(t);
            const LinearParams p{.x = x, .w = b.in(q.q.reshape({groups * out, in})), .y = y, .groups = g,
                                 .w_scale = b.in(q.scale_inv)};
            return b.done([&be, p] { be.linear(p); });
          }};
}

// rms_norm with its FP8 rows (RmsNormParams::y8, what the FP8 linears reading
// xn take): y, the e4m3 rows and their scales all bit-exact. 384 columns: the
// last iteration of the one-pass kernel holds one group, not two.
OpEntry rms_norm_fp8_entry(int64_t t, int64_t d) {
  return {"rms_norm", dims({t, d}) + " bf16 -> bf16 + FP8 rows, 3 groups", exact(), 0,
          [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            Tensor x = b.in(b.uniform({t, d}, kBf16, -5.f, 5.f));
            Tensor wt = b.in(b.uniform({3 * d}, kF32, -0.17f, 0.17f)), y = b.out({t, d}, kBf16);
            const Fp8Rows y8{b.out({t, d}, DType::F8E4M3), b.out({t, d / kFp8ActGroup}, kF32)};
            const RmsNormParams p{.x = x, .w = wt, .y = y, .groups = three_groups(t / 2, t * 3 / 4, t), .y8 = y8};
            return b.done([&be, p] { be.rms_norm(p); });
          }};
}

// The FP8 linear given its input's FP8 rows by the producer (LinearParams::x8;
// rms_norm's y8 made once before the timed op): the CPU ignores x8 and
// quantises x itself, the device takes x8 as it is (cuBLASLt: its scales regrouped).
OpEntry linear_fp8_x8_entry(int64_t t, int64_t in, int64_t out) {
  const std::string s = dims({t, in}) + " -> " + std::to_string(out) + " FP8 W8A8, x8 from rms_norm, 3 groups";
  return {"linear", s, rel_rms(4e-3, 0.05), 2.0 * t * in * out, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            Tensor x0 = b.in(b.uniform({t, in}, kBf16, -3.f, 3.f));
            Tensor nw = b.in(b.uniform({in}, kF32, -0.17f, 0.17f));
            Tensor x = be.alloc({t, in}, kBf16);
            const Fp8Rows x8{be.alloc({t, in}, DType::F8E4M3), be.alloc({t, in / kFp8ActGroup}, kF32)};
            be.rms_norm({.x = x0, .w = nw, .y = x, .groups = Groups::single(t), .y8 = x8});
            const Tensor w = b.uniform({3, out, in}, kBf16, -0.035f, 0.035f);
            const Fp8Blocks q = quantize_fp8_blocks(w, "linear.w");
            Tensor y = b.out_cols(t, out + 128, kBf16, 128, 128 + out);
            const LinearParams p{.x = x, .w = b.in(q.q.reshape({3 * out, in})), .y = y,
                                 .groups = three_groups(t / 2, t * 6 / 7, t), .w_scale = b.in(q.scale_inv), .x8 = x8};
            return b.done([&be, p] { be.linear(p); });
          }};
}

/// `deferred`: the DiT's call, o without the sink and the lse output (the own
/// flash kernel under --cuda-attention auto at head dim 128).
/// `fp8`: AttentionParams::fp8 (deferred too), against the CPU's FP8 reference (the bounds of
/// test_cuda_attn_cudnn FlashFp8CloseToCpuReference: Hopper's FP8 accumulation is not fp32-exact).
OpEntry attention_entry(std::vector<int32_t> cu, int64_t h, int64_t hd, int head_begin, float q_range,
                        bool deferred = false, bool fp8 = false) {
  const int64_t t = cu.back();
  int64_t max_len = 0;
  double flops = 0;
  std::string lens;
  for (size_t i = 1; i < cu.size(); ++i) {
    const int64_t n = cu[i] - cu[i - 1];
    max_len = std::max(max_len, n);
    flops += 4.0 * static_cast<double>(h * hd) * static_cast<double>(n) * static_cast<double>(n);
    lens = lens.empty() ? str_cat(n) : str_cat(lens, "+", n);
  }
  const std::string s = lens + " tokens, " + dims({h, hd}) + (head_begin ? ", head slice" : "") +
                        (q_range > 4 ? ", peaky" : "") + (deferred ? ", deferred sink (o + lse)" : "") + (fp8 ? ", FP8" : "");
  // The CUDA attention op runs cuDNN SDPA or the own flash kernel (P rounded to bf16 before P V, as the
  // official FA3) against the fp32-P CPU reference: test_cuda_attn_cudnn's bounds (measured on the H200:
  // rel-RMS 1.3-2.2e-3).
  // FP8: the CPU emulates the kernel's rounding points; a rare P lands one e4m3 step away (test_cuda_attn_cudnn).
  return {"attention", s, fp8 ? rel_rms(8e-3, 0.05) : rel_rms(5e-3, 0.05), flops, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            Tensor q = b.in(b.uniform({t, h, hd}, kBf16, -q_range, q_range));
            Tensor k = b.in(b.uniform({t, h, hd}, kBf16, -1.7f, 1.7f));
            Tensor v = b.in(b.uniform({t, h, hd}, kBf16, -1.7f, 1.7f));
            Tensor sh = b.uniform({head_begin + h + 2}, kF32, -3.f, 3.f);
            sh.data_as<float>()[head_begin] = 9.f;  // a sink that dominates the softmax
            Tensor sinks = b.in(sh), o = b.out({t, h, hd}, kBf16);
            const AttentionParams p{.q = q, .k = k, .v = v, .sinks = sinks, .o = o, .cu_seqlens = b.in_i32(cu),
                                    .max_seqlen = max_len, .scale = 1.f / std::sqrt(static_cast<float>(hd)),
                                    .head_begin = head_begin,
                                    .lse = deferred ? b.out({t, h}, kF32) : Tensor(), .fp8 = fp8};
            return b.done([&be, p] { be.attention(p); });
          }};
}

/// The attention producer (q/k RMSNorm, RoPE, the permutation into token order, v gathered) on a
/// [t, 3 h hd] qkv buffer with a rope table of 6 nb columns; bit-exact (test_cuda_attn_cudnn).
OpEntry attn_qkv_entry(int64_t t, int64_t h, int64_t hd, int64_t nb) {
  const std::string s = dims({t, h, hd}) + ", rotary " + std::to_string(6 * nb) + ", 3 groups, permuted rows";
  return {"attn_qkv", s, exact(), 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            Tensor qkv = b.in(b.uniform({t, 3 * h * hd}, kBf16, -3.f, 3.f));
            Tensor qn = b.in(b.uniform({3 * hd}, kF32, -0.5f, 0.5f)), kn = b.in(b.uniform({3 * hd}, kF32, -0.5f, 0.5f));
            Tensor table = b.in(b.uniform({t, 6 * nb}, kF32, -1.f, 1.f));
            const AttnQkvParams p{.qkv = qkv, .q_norm = qn, .k_norm = kn, .table = table,
                                  .src_rows = b.in_i32(permutation(b, t)), .q = b.out({t, h, hd}, kBf16),
                                  .k = b.out({t, h, hd}, kBf16), .v = b.out({t, h, hd}, kBf16),
                                  .groups = three_groups(t / 2, t * 3 / 4, t)};
            return b.done([&be, p] { be.attn_qkv(p); });
          }};
}

/// The DiT's FP8 attention path (--attention-compute fp8): attn_qkv with AttnQkvParams::fp8, whose
/// CUDA form writes the e4m3 operands directly (attn_qkv_fp8.cu), then attention with fp8_from_qkv.
/// Against the CPU's FP8 reference with attention_entry's FP8 bounds (the producer itself is bit-exact
/// with the two-pass path: test_cuda_attn_cudnn); timed as the pair, attention's FLOPs.
OpEntry attn_qkv_fp8_entry(std::vector<int32_t> cu, int64_t h) {
  const int64_t t = cu.back(), hd = 128;
  int64_t max_len = 0;
  double flops = 0;
  for (size_t i = 1; i < cu.size(); ++i) {
    const int64_t n = cu[i] - cu[i - 1];
    max_len = std::max(max_len, n);
    flops += 4.0 * static_cast<double>(h * hd) * static_cast<double>(n) * static_cast<double>(n);
  }
  const std::string s = dims({t, h, hd}) + ", " + std::to_string(cu.size() - 1) +
                        " samples, rotary 96, 3 groups, permuted rows, FP8 operands from the producer";
  return {"attn_qkv+attention", s, rel_rms(8e-3, 0.05), flops, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            Tensor qkv = b.in(b.uniform({t, 3 * h * hd}, kBf16, -3.f, 3.f));
            Tensor qn = b.in(b.uniform({3 * hd}, kF32, -0.5f, 0.5f)), kn = b.in(b.uniform({3 * hd}, kF32, -0.5f, 0.5f));
            Tensor table = b.in(b.uniform({t, 96}, kF32, -1.f, 1.f));
            Tensor sinks = b.in(b.uniform({h}, kF32, -3.f, 3.f)), d_cu = b.in_i32(cu);
            Tensor q = be.alloc({t, h, hd}, kBf16), k = be.alloc({t, h, hd}, kBf16), v = be.alloc({t, h, hd}, kBf16);
            const AttnQkvParams pq{.qkv = qkv, .q_norm = qn, .k_norm = kn, .table = table,
                                   .src_rows = b.in_i32(permutation(b, t)), .q = q, .k = k, .v = v,
                                   .groups = three_groups(t / 2, t * 3 / 4, t), .fp8 = true, .cu_seqlens = d_cu};
            const AttentionParams pa{.q = q, .k = k, .v = v, .sinks = sinks, .o = b.out({t, h, hd}, kBf16),
                                     .cu_seqlens = d_cu, .max_seqlen = max_len,
                                     .scale = 1.f / std::sqrt(static_cast<float>(hd)), .lse = b.out({t, h}, kF32),
                                     .fp8 = true, .fp8_from_qkv = true};
            return b.done([&be, pq, pa] {
              be.attn_qkv(pq);
              be.attention(pa);
            });
          }};
}

/// The attention consumer (sink factor, output gate, the permutation back) with a head slice of the
/// sinks; within 1 ulp (CUDA's log1pf in the sink factor; test_cuda_attn_cudnn).
// attn_out with out's FP8 rows (AttnOutParams::out8, the projection's FP8
// input): without the sink the op is bit-exact, so the rows are too.
OpEntry attn_out_fp8_entry(int64_t t, int64_t h, int64_t hd) {
  const std::string s = dims({t, h, hd}) + ", no sink, permuted rows + FP8 rows";
  return {"attn_out", s, exact(), 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const AttnOutParams p{.o = b.in(b.uniform({t, h, hd}, kBf16, -2.f, 2.f)),
                                  .g = b.in(b.uniform({t, h}, kBf16, -2.f, 2.f)),
                                  .src_rows = b.in_i32(permutation(b, t)), .out = b.out({t, h, hd}, kBf16),
                                  .out8 = {b.out({t, h * hd}, DType::F8E4M3), b.out({t, h * hd / 128}, kF32)}};
            return b.done([&be, p] { be.attn_out(p); });
          }};
}

OpEntry attn_out_entry(int64_t t, int64_t h, int64_t hd) {
  const std::string s = dims({t, h, hd}) + ", sink head slice, permuted rows";
  return {"attn_out", s, ulps(1), 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const AttnOutParams p{.o = b.in(b.uniform({t, h, hd}, kBf16, -2.f, 2.f)),
                                  .lse = b.in(b.uniform({t, h}, kF32, -3.f, 3.f)),
                                  .sinks = b.in(b.uniform({h + 3}, kF32, -3.f, 3.f)), .head_begin = 3,
                                  .g = b.in(b.uniform({t, h}, kBf16, -2.f, 2.f)),
                                  .src_rows = b.in_i32(permutation(b, t)), .out = b.out({t, h, hd}, kBf16)};
            return b.done([&be, p] { be.attn_out(p); });
          }};
}

/// The refiner's block-window attention (GQA) on a t x h x w grid with `text` tokens:
/// the pair list of make_refiner_plan for `win`.
OpEntry block_sparse_entry(int64_t frames, int64_t height, int64_t width, int64_t text, int64_t hq, int64_t hk,
                           int64_t hd, RefinerWindow win) {
  RefinerLayout layout;
  layout.frames = frames;
  layout.height = height;
  layout.width = width;
  layout.text_len = text;
  const RefinerPlan plan = make_refiner_plan(layout, RefinerArch(), win);
  const int64_t t = layout.tokens();
  // FLOP of the union of keys per q range (what the op computes).
  std::map<std::pair<int32_t, int32_t>, int64_t> keys;
  const int32_t* qr = plan.q_ranges.data_as<int32_t>();
  const int32_t* kr = plan.k_ranges.data_as<int32_t>();
  for (int64_t p = 0; p < plan.q_ranges.size(0); ++p) keys[{qr[2 * p], qr[2 * p + 1]}] += kr[2 * p + 1] - kr[2 * p];
  double flops = 0;
  for (const auto& [q, n] : keys) flops += 4.0 * static_cast<double>(hq * hd) * (q.second - q.first) * n;
  const std::string s = str_cat(frames, "x", height, "x", width, " video + ", text, " text tokens, ", hq, "/", hk,
                                " heads x ", hd, ", blocks ", win.block_t, "x", win.block_hw, "x", win.block_hw,
                                " radius ", win.radius_t, ", ", plan.q_ranges.size(0), " pairs");
  // bf16 P before P V on CUDA (the FFA rounding point) against the fp32-P CPU op: the attention bound.
  return {"block_sparse_attention", s, rel_rms(5e-3, 0.05), flops, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            Tensor q = b.in(b.uniform({t, hq, hd}, kBf16, -3.f, 3.f));
            Tensor k = b.in(b.uniform({t, hk, hd}, kBf16, -1.7f, 1.7f));
            Tensor v = b.in(b.uniform({t, hk, hd}, kBf16, -1.7f, 1.7f));
            const BlockSparseAttentionParams p{.q = q, .k = k, .v = v, .o = b.out({t, hq, hd}, kBf16),
                                               .q_ranges = plan.q_ranges, .k_ranges = plan.k_ranges,
                                               .scale = 1.f / std::sqrt(static_cast<float>(hd))};
            return b.done([&be, p] { be.block_sparse_attention(p); });
          }};
}

/// The mHC inputs at width d: state [t, 4d], logits [t, 24] at the scale of n * phi, branch weights.
struct MhcInputs {
  Tensor state, logits;
  std::shared_ptr<MhcBranchWeights> w;
  float c;
};
MhcInputs mhc_inputs(CaseBuilder& b, int64_t t, int64_t d, bool state_inout) {
  const float c = 1.0f / std::sqrt(static_cast<float>(4 * d)), l = 2.f / c;
  Tensor state = b.uniform({t, 4 * d}, kBf16, -3.f, 3.f);
  auto w = std::make_shared<MhcBranchWeights>(MhcBranchWeights{
      .alpha_pre = b.in(b.uniform({1}, kF32, 0.3f, 1.5f)), .alpha_post = b.in(b.uniform({1}, kF32, 0.3f, 1.5f)),
      .alpha_res = b.in(b.uniform({1}, kF32, 0.3f, 3.f)), .bias_pre = b.in(b.uniform({4}, kF32, -1.f, 1.f)),
      .bias_post = b.in(b.uniform({4}, kF32, -1.f, 1.f)), .bias_res = b.in(b.uniform({4, 4}, kF32, -2.f, 2.f))});
  Tensor logits = b.in(b.uniform({t, 24}, kF32, -l, l));
  return {state_inout ? b.inout(state) : b.in(state), logits, w, c};
}

// The opt-in fast kernels (src/cuda/fused_kernels.h) for entries marked
// "fused": on the CUDA backend they run whatever MAGI2_MHC_KERNEL and
// MAGI2_ROUTER_KERNEL say (nullptr elsewhere: the backend's own op).
struct FastPaths {
  std::shared_ptr<cuda::SplitScratch> scratch;
  cuda::FusedPaths paths;
};
std::shared_ptr<FastPaths> fast_paths(Backend& be, bool fused) {
  if (!fused || be.device() != Device::CUDA) return nullptr;
  auto f = std::make_shared<FastPaths>();
  f->scratch = split_scratch_on(be);
  f->paths = {.mhc = true, .router = true, .scratch = f->scratch.get()};
  return f;
}
cudaStream_t stream_of(Backend& be) { return static_cast<cudaStream_t>(cuda_stream_of(be)); }

// fused: the entries run the fast kernels (named so in the shape column); the
// plain entries follow the switches, so the logits' tolerance follows them too.
std::vector<OpEntry> mhc_entries(int64_t t, int64_t d, int groups, bool fused) {
  const std::string s = std::to_string(t) + " x 4x" + std::to_string(d) + (groups == 3 ? ", 3 groups" : "") +
                        (fused ? ", fused kernels" : "");
  const Groups g = groups == 3 ? three_groups(t / 2, t * 5 / 6, t) : Groups::single(t);
  // bf16 tensor-core logits: fp32 rounding noise, not the CPU's bits (test_cuda_fused.cpp).
  const Tolerance logits_tol =
      fused || cuda::fused_selected("MAGI2_MHC_KERNEL") ? rel_rms(1e-5, 1e-4, true) : exact();
  std::vector<OpEntry> e;
  e.push_back({"mhc_logits", s, logits_tol, 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 Tensor state = b.in(b.uniform({t, 4 * d}, kBf16, -3.f, 3.f));
                 Tensor nw = b.in(b.uniform({groups * 4 * d}, kF32, -0.2f, 0.2f));
                 Tensor phi = b.in(b.uniform({4 * d, 24}, kF32, -1.7f, 1.7f)), lg = b.out({t, 24}, kF32);
                 const MhcLogitsParams p{.state = state, .norm_w = nw, .phi = phi, .logits = lg, .groups = g};
                 return b.done([&be, p, f = fast_paths(be, fused)] {
                   f ? cuda::mhc_logits(p, stream_of(be), &f->paths) : be.mhc_logits(p);
                 });
               }});
  e.push_back({"mhc_pre", s, exact(), 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const MhcInputs m = mhc_inputs(b, t, d, false);
                 const MhcPreParams p{.state = m.state, .logits = m.logits, .w = m.w.get(),
                                      .a = b.out_cols(t, d + 8, kBf16, 8, d + 8), .h_pre = b.out({t, 4}, kF32), .c = m.c};
                 return b.done([&be, p, w = m.w, f = fast_paths(be, fused)] {
                   f ? cuda::mhc_pre(p, stream_of(be), &f->paths) : be.mhc_pre(p);
                 });
               }});
  // With the branch's pre-norm and its FP8 rows (MhcPreParams::norm, how the DiT runs it): the branch input
  // stays on chip (a omitted), y, the e4m3 rows and their scales bit-exact with mhc_pre + rms_norm.
  if (d % kFp8ActGroup == 0)
    e.push_back({"mhc_pre", s + " + pre-norm (3 groups), FP8 rows", exact(), 0, [=](Backend& be, uint64_t seed) {
                   CaseBuilder b(be, seed);
                   const MhcInputs m = mhc_inputs(b, t, d, false);
                   Tensor nw = b.in(b.uniform({3 * d}, kF32, -0.17f, 0.17f));
                   const Fp8Rows y8{b.out({t, d}, DType::F8E4M3), b.out({t, d / kFp8ActGroup}, kF32)};
                   const MhcPreParams p{.state = m.state, .logits = m.logits, .w = m.w.get(),
                                        .h_pre = b.out({t, 4}, kF32), .c = m.c,
                                        .norm = {.w = nw, .y = b.out({t, d}, kBf16),
                                                 .groups = three_groups(t / 2, t * 3 / 4, t), .y8 = y8}};
                   return b.done([&be, p, w = m.w, f = fast_paths(be, fused)] {
                     f ? cuda::mhc_pre(p, stream_of(be), &f->paths) : be.mhc_pre(p);
                   });
                 }});
  e.push_back({"mhc_post_res", s + ", state in place", exact(), 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const MhcInputs m = mhc_inputs(b, t, d, true);
                 Tensor o = b.in(b.uniform({t, d}, kBf16, -4.f, 4.f));
                 const MhcPostResParams p{.state = m.state, .o = o, .logits = m.logits, .w = m.w.get(),
                                          .h_post = b.out({t, 4}, kF32), .h_res = b.out({t, 16}, kF32), .c = m.c};
                 return b.done([&be, p, w = m.w, f = fast_paths(be, fused)] {
                   f ? cuda::mhc_post_res(p, stream_of(be), &f->paths) : be.mhc_post_res(p);
                 });
               }});
  // With the next branch's logits of the new state (MhcPostResParams::next, as the DiT calls it; one pass on
  // the fused path: mhc_post_logits.cu): both outputs held to the logits' tolerance here (the state's bytes
  // are test_cuda_fused's MhcPostResWithNextLogitsInOnePass).
  e.push_back({"mhc_post_res", s + ", + next logits", logits_tol, 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const MhcInputs m = mhc_inputs(b, t, d, true);
                 Tensor o = b.in(b.uniform({t, d}, kBf16, -4.f, 4.f));
                 Tensor nw = b.in(b.uniform({groups * 4 * d}, kF32, -0.2f, 0.2f));
                 Tensor phi = b.in(b.uniform({4 * d, 24}, kF32, -1.7f, 1.7f));
                 const MhcPostResParams p{.state = m.state, .o = o, .logits = m.logits, .w = m.w.get(), .c = m.c,
                                          .next = {.norm_w = nw, .phi = phi, .logits = b.out({t, 24}, kF32),
                                                   .groups = g}};
                 return b.done([&be, p, w = m.w, f = fast_paths(be, fused)] {
                   f ? cuda::mhc_post_res(p, stream_of(be), &f->paths) : be.mhc_post_res(p);
                 });
               }});
  return e;
}

// The fused router's weights and margins carry its tensor-core logits' fp32
// noise; natural routing may then differ where the margin is within that noise
// (test_cuda_fused.cpp checks the selection where the margin exceeds 0.01).
OpEntry moe_route_entry(int64_t t, int64_t dh, int mh, int ne, int k, bool forced, bool fused = false) {
  const std::string s = std::to_string(t) + " tokens, " + std::to_string(mh) + " heads x " + std::to_string(ne) +
                        " experts, d_head " + std::to_string(dh) + ", top-" + std::to_string(k) +
                        (forced ? ", forced" : "") + (fused ? ", fused kernel" : "");
  const bool fast = (fused || cuda::fused_selected("MAGI2_ROUTER_KERNEL")) && dh % 32 == 0 && ne % 32 == 0;
  return {"moe_route", s, fast ? rel_rms(1e-4, 1e-4) : exact(), 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const float a = 1.7f / std::sqrt(static_cast<float>(dh));
            Tensor r = b.in(b.uniform({t, mh * dh}, kBf16, -2.f, 2.f));
            Tensor gate = b.in(b.uniform({mh * ne, dh}, kF32, -a, a));
            Tensor bias = b.in(b.uniform({mh * ne}, kF32, -0.5f, 0.5f));
            Tensor fi = forced ? b.in(routing(b, mh, t, ne, k)) : Tensor();
            const MoeRouteParams p{.r = r, .gate = gate, .bias = bias, .idx = b.out({mh, t, k}, DType::I32),
                                   .weight = b.out({mh, t, k}, kF32), .forced_idx = fi, .margin = b.out({mh, t}, kF32),
                                   .num_heads = mh, .num_experts = ne, .top_k = k, .route_scale = 4.9f};
            return b.done([&be, p, f = fast_paths(be, fused)] {
              f ? cuda::moe_route(p, stream_of(be), &f->paths) : be.moe_route(p);
            });
          }};
}

OpEntry moe_experts_entry(int64_t t, int64_t dh, int64_t de, int mh, int ne, int k) {
  const std::string s = std::to_string(t) + " tokens, " + std::to_string(mh) + " heads x " + std::to_string(ne) +
                        " experts, " + std::to_string(dh) + " -> " + std::to_string(de) + ", top-" + std::to_string(k);
  const double flops = 6.0 * static_cast<double>(t * mh * k) * static_cast<double>(dh * de);
  return {"moe_experts", s, rel_rms(2e-2, 0.05, true), flops, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            // G and U of standard deviation ~3 (both cross the +-7 clamps), as the grouped-GEMM parity test.
            const float a = 5.2f / std::sqrt(static_cast<float>(dh)), c = 1.47f / std::sqrt(static_cast<float>(de));
            Tensor r = b.in(b.uniform({t, mh * dh}, kBf16, -1.4f, 1.4f));
            Tensor wg = b.in(b.uniform({mh * ne, dh, de}, kBf16, -a, a));
            Tensor wu = b.in(b.uniform({mh * ne, dh, de}, kBf16, -a, a));
            Tensor wd = b.in(b.uniform({mh * ne, de, dh}, kBf16, -c, c));
            Tensor idx = b.in(routing(b, mh, t, ne, k)), w = b.in(b.uniform({mh, t, k}, kF32, 0.1f, 1.5f));
            const MoeExpertsParams p{.r = r, .w_gate = wg, .w_up = wu, .w_down = wd, .idx = idx, .weight = w,
                                     .out = b.out({t, mh * dh}, kBf16), .num_heads = mh, .num_experts = ne,
                                     .top_k = k};
            return b.done([&be, p] { be.moe_experts(p); });
          }};
}

// FP8 routed experts computed as W8A8 (docs/fp8.md; the fused FP8 kernel):
// the same inputs as moe_experts_entry with the banks block-quantised on the
// host. Tolerance of test_cuda_fp8_w8a8.cpp (the tensor cores' summation order
// and the SFU sigmoid can move a Z element across an e4m3 rounding boundary,
// one e4m3 step of that element).
// rows8: out's FP8 rows too (MoeExpertsParams::out8, written by the combine).
OpEntry moe_experts_w8a8_entry(int64_t t, int64_t dh, int64_t de, int mh, int ne, int k, bool rows8 = false) {
  const std::string s = std::to_string(t) + " tokens, " + std::to_string(mh) + " heads x " + std::to_string(ne) +
                        " experts, " + std::to_string(dh) + " -> " + std::to_string(de) + ", top-" +
                        std::to_string(k) + ", FP8 W8A8" + (rows8 ? " + FP8 rows" : "");
  const double flops = 6.0 * static_cast<double>(t * mh * k) * static_cast<double>(dh * de);
  return {"moe_experts", s, rel_rms(3e-2, 0.08, true), flops, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const float a = 5.2f / std::sqrt(static_cast<float>(dh)), c = 1.47f / std::sqrt(static_cast<float>(de));
            Tensor r = b.in(b.uniform({t, mh * dh}, kBf16, -1.4f, 1.4f));
            const Fp8Blocks wg = quantize_fp8_blocks(b.uniform({mh * ne, dh, de}, kBf16, -a, a), "W_gate");
            const Fp8Blocks wu = quantize_fp8_blocks(b.uniform({mh * ne, dh, de}, kBf16, -a, a), "W_up");
            const Fp8Blocks wd = quantize_fp8_blocks(b.uniform({mh * ne, de, dh}, kBf16, -c, c), "W_down");
            Tensor idx = b.in(routing(b, mh, t, ne, k)), w = b.in(b.uniform({mh, t, k}, kF32, 0.1f, 1.5f));
            const MoeExpertsParams p{.r = r, .w_gate = b.in(wg.q), .w_up = b.in(wu.q), .w_down = b.in(wd.q),
                                     .w_gate_scale = b.in(wg.scale_inv), .w_up_scale = b.in(wu.scale_inv),
                                     .w_down_scale = b.in(wd.scale_inv), .idx = idx, .weight = w,
                                     .out = b.out({t, mh * dh}, kBf16), .num_heads = mh, .num_experts = ne,
                                     .top_k = k, .fp8_compute = Fp8Compute::W8A8,
                                     .out8 = rows8 ? Fp8Rows{b.out({t, mh * dh}, DType::F8E4M3),
                                                             b.out({t, mh * dh / kFp8ActGroup}, kF32)}
                                                   : Fp8Rows{}};
            return b.done([&be, p] { be.moe_experts(p); });
          }};
}

/// The sampler ops (spec pipeline §4-5) on latents of n f32 elements; every one bit-exact.
std::vector<OpEntry> sampler_entries(int64_t n, const std::string& what) {
  std::vector<OpEntry> e;
  e.push_back({"copy_elems", what + ", permuted source", exact(), 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const CopyElemsParams p{.src = b.in(b.uniform({n}, kF32, -3.f, 3.f)),
                                         .dst = b.inout(b.uniform({n}, kF32, -1.f, 1.f)),
                                         .src_index = b.in_i32(permutation(b, n))};
                 return b.done([&be, p] { be.copy_elems(p); });
               }});
  e.push_back({"cfg_combine", what + ", scale 5", exact(), 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const CfgCombineParams p{.pred = b.in(b.uniform({2, n}, kF32, -3.f, 3.f)), .v = b.out({n}, kF32),
                                          .scale = 5.f};
                 return b.done([&be, p] { be.cfg_combine(p); });
               }});
  for (const int step : {0, 3}) {  // step 0: predictor only; step 3: UniC corrector and order 2
    e.push_back({"flow_unipc_step", str_cat(what, ", step ", step, " of 7, shift 7"), exact(), 0,
                 [=](Backend& be, uint64_t seed) {
                   CaseBuilder b(be, seed);
                   FlowUniPC sched;
                   sched.set_timesteps(7, 7.0);
                   const std::vector<UniPcStepCoef> rows = sched.step_table();
                   Tensor coef = Tensor::empty({static_cast<int64_t>(rows.size()), 16}, kF32);
                   std::memcpy(coef.data(), rows.data(), rows.size() * sizeof(UniPcStepCoef));
                   Tensor sample = b.inout(b.uniform({n}, kF32, -3.f, 3.f)), v = b.in(b.uniform({n}, kF32, -3.f, 3.f));
                   Tensor last = b.inout(b.uniform({n}, kF32, -3.f, 3.f)), m0 = b.inout(b.uniform({n}, kF32, -3.f, 3.f));
                   const FlowUniPCStepParams p{.sample = sample, .v = v, .last = last, .m0 = m0,
                                               .m1 = b.inout(b.uniform({n}, kF32, -3.f, 3.f)), .coef = b.in(coef),
                                               .step = b.in_i32({step})};
                   return b.done([&be, p] { be.flow_unipc_step(p); });
                 }});
  }
  e.push_back({"nonfinite_check", what + ", one NaN", exact(), 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 Tensor x = b.uniform({n}, kF32, -3.f, 3.f);
                 x.data_as<float>()[n / 3] = std::numeric_limits<float>::quiet_NaN();
                 const int32_t none = std::numeric_limits<int32_t>::max();
                 const NonfiniteCheckParams p{.x = b.in(x), .first = b.inout(Tensor::from_i32({2}, {none, none})),
                                              .step = b.in_i32({4}), .slot = 1};
                 return b.done([&be, p] { be.nonfinite_check(p); });
               }});
  return e;
}

/// fill_rows and advance_step: the step counter's ops (tiny; launch-bound).
std::vector<OpEntry> step_counter_entries() {
  std::vector<OpEntry> e;
  e.push_back({"fill_rows", "table 7x1024, step 3, 512 of 2048 rows", exact(), 0, [](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const FillRowsParams p{.table = b.in(b.uniform({7, 1024}, kF32, -1.f, 1.f)), .step = b.in_i32({3}),
                                        .rows = b.in_i32(draws(b, 512, 2048)),
                                        .out = b.inout(b.uniform({2048, 1024}, kF32, -1.f, 1.f))};
                 return b.done([&be, p] { be.fill_rows(p); });
               }});
  e.push_back({"advance_step", "counter [1] i32 from 41", exact(), 0, [](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const AdvanceStepParams p{.step = b.inout(Tensor::from_i32({1}, {41}))};
                 return b.done([&be, p] { be.advance_step(p); });
               }});
  return e;
}

}  // namespace

std::vector<OpEntry> backend_op_table() {
  std::vector<OpEntry> t;
  t.push_back(rms_norm_entry(2048, 3072, 1, false));
  t.push_back(rms_norm_entry(333, 5120, 1, false, true));
  t.push_back(rms_norm_entry(700, 128, 24, true));
  t.push_back(rms_norm_fp8_entry(2048, 3072));
  t.push_back(rms_norm_fp8_entry(333, 384));

  t.push_back(linear_entry(2048, 3072, 3072, 1, false));
  t.push_back(linear_entry(640, 3072, 1536, 3, false));
  t.push_back(linear_entry(200, 5120, 768, 1, true));
  t.push_back(linear_fp8_entry(512, 3072, 1024, 1));
  t.push_back(linear_fp8_entry(640, 1280, 3072, 3));
  t.push_back(linear_fp8_x8_entry(1024, 3072, 2048));

  // swiglu7: with MAGI2_SWIGLU7_KERNEL=fused (the default) the sigmoid runs on the SFU, a few fp32 ulp
  // from the CPU's, so a rare element is one bf16 ulp off (and its FP8 group may move with it); the
  // "reference kernel" rows run the CPU's bytes, where the exp is the one operation not IEEE-exact on both
  // sides: a handful of 1-ulp outputs allowed (with FP8 rows a differing z element can move its whole
  // 1 x 128 group, so the allowance is 3 groups).
  const bool sfu = cuda::fused_selected("MAGI2_SWIGLU7_KERNEL");
  for (const bool ref : {false, true}) {
    if (ref && !sfu) break;  // the plain rows run the reference kernel already
    const bool exact_bytes = ref || !sfu;
    const std::string k = ref ? ", reference kernel" : "";
    const auto run = [ref](Backend& be, const SwiGLU7Params& p) {
      if (ref && be.device() == Device::CUDA)
        cuda::swiglu7(p, stream_of(be), false);
      else
        be.swiglu7(p);
    };
    t.push_back({"swiglu7", "2048x16384 -> 2048x8192, beyond the +-7 clamps" + k,
                 exact_bytes ? exact(3) : rel_rms(2e-4, 0.01, true), 0, [=](Backend& be, uint64_t s) {
                   CaseBuilder b(be, s);
                   const SwiGLU7Params p{.u = b.in(b.uniform({2048, 16384}, kBf16, -7.f, 7.f)),
                                         .z = b.out({2048, 8192}, kBf16)};
                   return b.done([&be, p, run] { run(be, p); });
                 }});
    t.push_back({"swiglu7", "2048x5120 -> 2048x2560 + FP8 rows in column slices" + k,
                 exact_bytes ? exact(3 * 129) : rel_rms(2e-3, 0.08, true), 0, [=](Backend& be, uint64_t s) {
                   CaseBuilder b(be, s);
                   const SwiGLU7Params p{.u = b.in(b.uniform({2048, 5120}, kBf16, -7.f, 7.f)),
                                         .z = b.out({2048, 2560}, kBf16),
                                         .z8 = {b.out_cols(2048, 2560 + 128, DType::F8E4M3, 128, 128 + 2560),
                                                b.out_cols(2048, 21, kF32, 1, 21)}};
                   return b.done([&be, p, run] { run(be, p); });
                 }});
  }

  for (const auto& [rows, width, begin, dt] : {std::tuple<int64_t, int64_t, int64_t, DType>{2048, 3072, 64, kBf16},
                                               {500, 33, 1, kBf16}, {500, 96, 0, kF32}}) {
    const std::string s = dims({rows, width}) + (dt == kBf16 ? " bf16" : " f32") + " of 2100 rows" +
                          (begin ? ", column slice" : "") + ", repeats";
    t.push_back({"gather_rows", s, exact(), 0, [=](Backend& be, uint64_t seed) {
                   CaseBuilder b(be, seed);
                   Tensor src = b.in(b.uniform({2100, width + 2 * begin}, dt, -2.f, 2.f));
                   const GatherRowsParams p{.src = src.slice_cols(begin, begin + width), .dst = b.out({rows, width}, dt),
                                            .index = b.in_i32(draws(b, rows, 2100))};
                   return b.done([&be, p] { be.gather_rows(p); });
                 }});
  }

  t.push_back({"rope_table", "8x16x28 video + 3 tokens, 16 bands (fp32 sin/cos)", ulps(1), 0,
               [](Backend& be, uint64_t) {
                 CaseBuilder b(be, 0);
                 std::vector<float> bv(16);
                 for (size_t i = 0; i < bv.size(); ++i) bv[i] = 3.14159265f * std::pow(2.0f, 0.5f * float(i) - 2.0f);
                 Tensor coords = b.in(video_coords(8, 16, 28, {8, 32, 56}));
                 const RopeTableParams p{.coords = coords, .bands = b.in(Tensor::from_f32({16}, bv)),
                                         .out = b.out({coords.size(0), 96}, kF32)};
                 return b.done([&be, p] { be.rope_table(p); });
               }});

  for (const auto& [rows, permuted] : {std::pair<int64_t, bool>{2048, true}, {1500, false}}) {
    const std::string s = dims({rows, 24, 128}) + " f32 -> bf16, 16 bands" + (permuted ? ", permuted rows" : "");
    t.push_back({"rope", s, exact(), 0, [=](Backend& be, uint64_t seed) {
                   CaseBuilder b(be, seed);
                   Tensor x = b.in(b.uniform({rows, 24, 128}, kF32, -3.5f, 3.5f));
                   Tensor table = b.in(b.uniform({rows, 96}, kF32, -1.f, 1.f));  // any values: pure fp32 arithmetic
                   Tensor src_rows = permuted ? b.in_i32(permutation(b, rows)) : Tensor();
                   const RopeParams p{.x = x, .table = table, .out = b.out({rows, 24, 128}, kBf16), .src_rows = src_rows};
                   return b.done([&be, p] { be.rope(p); });
                 }});
  }

  t.push_back(attn_qkv_entry(2048, 24, 128, 16));
  t.push_back(attn_qkv_fp8_entry({0, 1, 1, 1500, 3100}, 24));
  t.push_back(attn_out_entry(2048, 24, 128));
  t.push_back(attn_out_fp8_entry(2048, 24, 128));
  t.push_back(attention_entry({0, 1024, 1024, 2048}, 24, 128, 0, 3.5f));
  t.push_back(attention_entry({0, 1, 1, 1500, 3100}, 24, 128, 0, 3.5f, true));
  t.push_back(attention_entry({0, 1, 1, 1500, 3100}, 24, 128, 0, 3.5f, true, true));
  t.push_back(attention_entry({0, 5, 37, 100}, 4, 64, 2, 1.7f));
  t.push_back(attention_entry({0, 700}, 4, 64, 0, 7.f));
  t.push_back(block_sparse_entry(6, 8, 12, 37, 4, 2, 32, RefinerWindow{.block_t = 2, .block_hw = 2, .radius_t = 1,
                                                                   .radius_h = 1, .radius_w = 1}));
  t.push_back(block_sparse_entry(5, 7, 9, 13, 4, 4, 64, RefinerWindow{.block_t = 2, .block_hw = 2, .radius_t = 1,
                                                                  .radius_h = 1, .radius_w = 1}));
  t.push_back(block_sparse_entry(16, 16, 32, 300, 8, 2, 128, RefinerWindow{}));

  // gate: the exp (the gate's sigmoid) is the one operation not IEEE-exact on both sides: a handful of 1-ulp outputs.
  t.push_back({"gate", "2048x24x128 in place, g a column slice", exact(3), 0, [](Backend& be, uint64_t s) {
                 CaseBuilder b(be, s);
                 Tensor o = b.inout(b.uniform({2048, 24, 128}, kBf16, -3.5f, 3.5f));
                 Tensor g = b.in(b.uniform({2048, 3096}, kBf16, -5.f, 5.f));
                 const GateParams p{.o = o, .g = g.slice_cols(3072, 3096)};
                 return b.done([&be, p] { be.gate(p); });
               }});

  for (const auto& [rows, dt] : {std::pair<int64_t, DType>{2048, kBf16}, {513, kF32}}) {
    const std::string s = dims({rows, 3072}) + (dt == kBf16 ? " bf16" : " f32");
    t.push_back({"add", s, exact(), 0, [=](Backend& be, uint64_t seed) {
                   CaseBuilder b(be, seed);
                   const AddParams p{.a = b.in(b.uniform({rows, 3072}, dt, -7.f, 7.f)),
                                     .b = b.in(b.uniform({rows, 3072}, dt, -1.7f, 1.7f)),
                                     .out = b.out({rows, 3072}, dt)};
                   return b.done([&be, p] { be.add(p); });
                 }});
  }
  // With a third term (AddParams::c; the MoE's last op): out = bf16(a + bf16(b + c)), c a column slice.
  t.push_back({"add", dims({2048, 3072}) + " bf16 + c (3 terms)", exact(), 0, [](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 Tensor c = b.in(b.uniform({2048, 3080}, kBf16, -2.f, 2.f));
                 const AddParams p{.a = b.in(b.uniform({2048, 3072}, kBf16, -7.f, 7.f)),
                                   .b = b.in(b.uniform({2048, 3072}, kBf16, -1.7f, 1.7f)),
                                   .out = b.out({2048, 3072}, kBf16), .c = c.slice_cols(8, 3080)};
                 return b.done([&be, p] { be.add(p); });
               }});

  t.push_back({"copy_cols", "2048x128 f32 into columns [256, 384) of 2048x9216", exact(), 0,
               [](Backend& be, uint64_t s) {
                 CaseBuilder b(be, s);
                 const CopyColsParams p{.src = b.in(b.uniform({2048, 128}, kF32, -1.f, 1.f)),
                                        .dst = b.inout(b.uniform({2048, 9216}, kF32, -1.f, 1.f)), .col_begin = 256};
                 return b.done([&be, p] { be.copy_cols(p); });
               }});
  t.push_back({"copy", "2048x3072 bf16 column slice -> contiguous, on the device", exact(), 0,
               [](Backend& be, uint64_t s) {
                 CaseBuilder b(be, s);
                 Tensor src = b.in(b.uniform({2048, 3200}, kBf16, -2.f, 2.f));
                 const CopyParams p{.src = src.slice_cols(100, 3172), .dst = b.out({2048, 3072}, kBf16)};
                 return b.done([&be, p] { be.copy(p); });
               }});
  for (const DType from : {kF32, kBf16}) {
    const DType to = from == kF32 ? kBf16 : kF32;
    t.push_back({"cast", from == kF32 ? "2048x3072 f32 -> bf16" : "2048x3072 bf16 -> f32", exact(), 0,
                 [=](Backend& be, uint64_t s) {
                   CaseBuilder b(be, s);
                   const CastParams p{.src = b.in(b.uniform({2048, 3072}, from, -170.f, 170.f)),
                                      .dst = b.out({2048, 3072}, to)};
                   return b.done([&be, p] { be.cast(p); });
                 }});
  }

  for (const bool fused : {false, true}) {
    for (OpEntry& e : mhc_entries(2048, 3072, 3, fused)) t.push_back(std::move(e));
    for (OpEntry& e : mhc_entries(127, 256, 1, fused)) t.push_back(std::move(e));
  }

  t.push_back(moe_route_entry(2048, 256, 12, 256, 6, false));
  t.push_back(moe_route_entry(127, 64, 4, 16, 4, false));
  t.push_back(moe_route_entry(127, 64, 4, 16, 4, true));
  t.push_back(moe_route_entry(2048, 256, 12, 256, 6, true, true));

  t.push_back(moe_experts_entry(127, 64, 64, 4, 16, 4));
  t.push_back(moe_experts_entry(200, 256, 1280, 2, 16, 6));
  t.push_back(moe_experts_entry(2048, 256, 1280, 2, 16, 6));
  t.push_back(moe_experts_w8a8_entry(200, 256, 1280, 2, 16, 6));
  t.push_back(moe_experts_w8a8_entry(200, 256, 1280, 2, 16, 6, true));

  for (OpEntry& e : sampler_entries(2048 * 192, "2048x192 latent elements")) t.push_back(std::move(e));
  for (OpEntry& e : sampler_entries(100003, "100003 elements (odd)")) t.push_back(std::move(e));
  for (OpEntry& e : step_counter_entries()) t.push_back(std::move(e));
  for (OpEntry& e : text_encoder_op_entries()) t.push_back(std::move(e));
  for (OpEntry& e : codec_op_entries()) t.push_back(std::move(e));
  return t;
}

}  // namespace magi2::test
