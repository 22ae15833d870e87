// The attention rows of the backend op table (ops_table.h): the DiT's
// attention producer (attn_qkv), core (attention, its FP8 path) and consumer
// (attn_out) at the release widths (24 heads x 128, 16 RoPE bands per axis) on
// 2048-3100 tokens, small odd head counts and lengths, and the refiner's
// block-window attention (GQA) on small grids. Tolerances are the ones stated
// by tests/cuda/test_cuda_{attention,attn_cudnn}.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "cuda/backend_cuda.h"
#include "models/magi2_refiner/tokens.h"
#include "ops_table.h"

namespace magi2::test {

namespace {

constexpr DType kBf16 = DType::BF16;
constexpr DType kF32 = DType::F32;

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

}  // namespace

std::vector<OpEntry> attention_op_entries() {
  std::vector<OpEntry> t;
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
  return t;
}

}  // namespace magi2::test
