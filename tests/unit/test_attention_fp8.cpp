// FP8 attention on the CPU backend (AttentionParams::fp8, the reference of
// the CUDA kernel; cpu/attention_fp8.cpp): a one-key sample gives its value
// row through e4m3 exactly, the output stays within FP8's error of the bf16
// attention over samples that cross key tiles (1-token and empty samples
// included), the bytes do not depend on the thread count, any head dim runs
// on the CPU, and a call without the lse fails with one error naming it.
// Also exp2_fma_f32 (ops/numerics.h), the software exponential the CUDA
// kernel's softmax uses for part of its values: its error bound, exact
// powers of two, and its edges.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "ops/numerics.h"
#include "ops_reference.h"

namespace magi2 {
namespace {

AttentionParams params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& lse,
                       const std::vector<int32_t>& cu) {
  return {.q = q, .k = k, .v = v, .o = o, .cu_seqlens = i32(cu),
          .scale = 1.f / std::sqrt(static_cast<float>(q.size(2))), .lse = lse, .fp8 = true};
}

TEST(AttentionFp8, OneKeyGivesItsValueRowThroughE4m3) {
  Rng g(3);
  auto be = make_cpu_backend(2);
  const int64_t h = 2, hd = 128;
  Tensor q = rand_t({1, h, hd}, DType::BF16, g, -2, 2), k = rand_t({1, h, hd}, DType::BF16, g, -2, 2);
  Tensor v = rand_t({1, h, hd}, DType::BF16, g, -3, 3);
  Tensor o = Tensor::empty({1, h, hd}, DType::BF16), lse = Tensor::empty({1, h}, DType::F32);
  be->attention(params(q, k, v, o, lse, {0, 1}));
  for (int64_t head = 0; head < h; ++head) {
    float amax = 0.f;
    for (int64_t d = 0; d < hd; ++d) amax = fp8_amax_step(amax, static_cast<float>(at(v, head * hd + d)));
    const float sv = fp8_act_scale(amax);
    for (int64_t d = 0; d < hd; ++d) {
      // p = 2^8 exactly, l = 2^8: o = bf16(v8 * 2^8 * (sv / 2^8)) = bf16(v8 sv).
      const float v8 = e4m3_bits_to_f32(fp8_act_quant(static_cast<float>(at(v, head * hd + d)), sv));
      EXPECT_EQ(at(o, head * hd + d), bf16_ref(static_cast<double>(v8 * sv))) << head << ", " << d;
    }
  }
}

TEST(AttentionFp8, WithinFp8ErrorOfBf16AndThreadInvariant) {
  const std::vector<int32_t> cu = {0, 1, 1, 300, 428, 700};
  const int64_t t = cu.back(), h = 3, hd = 128;
  Rng g(5);
  const Tensor q = rand_t({t, h, hd}, DType::BF16, g, -2, 2), k = rand_t({t, h, hd}, DType::BF16, g, -2, 2);
  const Tensor v = rand_t({t, h, hd}, DType::BF16, g, -2, 2);
  const std::vector<Tensor> got = thread_invariant([&](Backend& be) {
    Tensor o = Tensor::empty({t, h, hd}, DType::BF16), lse = Tensor::empty({t, h}, DType::F32);
    be.attention(params(q, k, v, o, lse, cu));
    return std::vector<Tensor>{o, lse};
  });
  auto be = make_cpu_backend(2);
  Tensor want = Tensor::empty({t, h, hd}, DType::BF16), want_lse = Tensor::empty({t, h}, DType::F32);
  AttentionParams exact = params(q, k, v, want, want_lse, cu);
  exact.fp8 = false;
  be->attention(exact);
  const test::Diff d = test::compare(got[0], want);
  double lse_err = 0;
  for (int64_t i = 0; i < t * h; ++i) lse_err = std::max(lse_err, std::fabs(at(got[1], i) - at(want_lse, i)));
  std::printf("FP8 attention vs bf16: rel-RMS %.4f, max-abs %.4f; lse max-abs %.4f\n", d.rel_rms, d.max_abs,
              lse_err);
  // e4m3 keeps 3 mantissa bits (2^-4 relative steps) in Q, K, V and P.
  EXPECT_LT(d.rel_rms, 0.07);
  EXPECT_LT(lse_err, 0.12);
}

TEST(AttentionFp8, AnyHeadDimOnTheCpuAndTheLseIsNeeded) {
  Rng g(7);
  auto be = make_cpu_backend(1);
  const std::vector<int32_t> cu = {0, 5, 200};
  const int64_t t = cu.back(), h = 2, hd = 32;  // the tiny models' head dim
  const Tensor q = rand_t({t, h, hd}, DType::BF16, g, -2, 2), k = rand_t({t, h, hd}, DType::BF16, g, -2, 2);
  const Tensor v = rand_t({t, h, hd}, DType::BF16, g, -2, 2);
  Tensor o = Tensor::empty(q.shape(), DType::BF16), lse = Tensor::empty({t, h}, DType::F32);
  be->attention(params(q, k, v, o, lse, cu));
  Tensor want = Tensor::empty(q.shape(), DType::BF16), want_lse = Tensor::empty({t, h}, DType::F32);
  AttentionParams exact = params(q, k, v, want, want_lse, cu);
  exact.fp8 = false;
  be->attention(exact);
  EXPECT_LT(test::compare(o, want).rel_rms, 0.07);
  EXPECT_TRUE(test::throws_with([&] { be->attention(params(q, k, v, o, Tensor(), cu)); },
                                {"attention.fp8", "lse"}));
}

TEST(AttentionFp8, Exp2FmaWithinItsBoundExactAtIntegersAndFiniteAtMinusInf) {
  // The softmax's range: x = c s + 8 - m <= 8, far below once a row's maximum moves on.
  double worst = 0;
  for (int i = 0; i <= 1330000; ++i) {
    const float x = -125.0f + 1e-4f * static_cast<float>(i);
    const double want = std::exp2(static_cast<double>(x));
    worst = std::max(worst, std::fabs(static_cast<double>(exp2_fma_f32(x)) - want) / want);
  }
  EXPECT_LT(worst, 1.03e-4);
  for (int j = -125; j <= 8; ++j) EXPECT_EQ(exp2_fma_f32(static_cast<float>(j)), std::ldexp(1.0f, j)) << j;
  EXPECT_EQ(exp2_fma_f32(-INFINITY), std::ldexp(1.0f, -125));  // a masked key: as good as 0 next to l >= 1
  EXPECT_EQ(exp2_fma_f32(-1e30f), std::ldexp(1.0f, -125));
  EXPECT_TRUE(std::isnan(exp2_fma_f32(NAN)));
}

}  // namespace
}  // namespace magi2
