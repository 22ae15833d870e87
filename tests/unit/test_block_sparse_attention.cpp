// The block-sparse attention op (ops.h BlockSparseAttentionParams) against a
// brute-force masked softmax in double, and the refiner's attention pairs
// (models/magi2_refiner/tokens.h) against a mask built from the block grid.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/seeded_random.h"
#include "ops/ops.h"
#include "models/magi2_refiner/tokens.h"
#include "util/testing.h"

namespace magi2 {
namespace {

Tensor random_bf16(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::zeros(s, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = static_cast<float>(normal_sample(seed, static_cast<uint64_t>(i), 0, 1));
  return t.to(DType::BF16);
}

// Dense mask [T, T] from the pairs (union).
std::vector<char> mask_of(const Tensor& qr, const Tensor& kr, int64_t t) {
  std::vector<char> m(static_cast<size_t>(t * t), 0);
  for (int64_t p = 0; p < qr.size(0); ++p)
    for (int32_t i = qr.data_as<int32_t>()[2 * p]; i < qr.data_as<int32_t>()[2 * p + 1]; ++i)
      for (int32_t j = kr.data_as<int32_t>()[2 * p]; j < kr.data_as<int32_t>()[2 * p + 1]; ++j) m[i * t + j] = 1;
  return m;
}

TEST(BlockSparseAttention, MatchesMaskedSoftmaxWithGqa) {
  const int64_t t = 37, hq = 4, hk = 2, hd = 16;
  const Tensor q = random_bf16({t, hq, hd}, 1), k = random_bf16({t, hk, hd}, 2), v = random_bf16({t, hk, hd}, 3);
  // Three q ranges (one twice, with two disjoint key ranges), one row uncovered.
  const Tensor qr = Tensor::from_i32({4, 2}, {0, 10, 0, 10, 10, 30, 30, 36});
  const Tensor kr = Tensor::from_i32({4, 2}, {0, 5, 20, 37, 5, 25, 0, 37});
  Tensor o = Tensor::zeros({t, hq, hd}, DType::BF16);
  auto be = make_cpu_backend();
  const float scale = 0.25f;
  be->block_sparse_attention({.q = q, .k = k, .v = v, .o = o, .q_ranges = qr, .k_ranges = kr, .scale = scale});
  const auto m = mask_of(qr, kr, t);
  const Tensor qf = q.to(DType::F32), kf = k.to(DType::F32), vf = v.to(DType::F32), of = o.to(DType::F32);
  double max_err = 0;
  for (int64_t i = 0; i < t; ++i)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / (hq / hk);
      std::vector<double> s(t, -INFINITY);
      double mx = -INFINITY;
      for (int64_t j = 0; j < t; ++j) {
        if (!m[i * t + j]) continue;
        double acc = 0;
        for (int64_t d = 0; d < hd; ++d)
          acc += double(qf.data_as<float>()[(i * hq + h) * hd + d]) * kf.data_as<float>()[(j * hk + kh) * hd + d];
        s[j] = acc * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < t; ++j) sum += m[i * t + j] ? std::exp(s[j] - mx) : 0.0;
      for (int64_t d = 0; d < hd; ++d) {
        double ref = 0;
        for (int64_t j = 0; j < t; ++j)
          if (m[i * t + j]) ref += std::exp(s[j] - mx) / sum * vf.data_as<float>()[(j * hk + kh) * hd + d];
        const double got = of.data_as<float>()[(i * hq + h) * hd + d];
        if (sum == 0) {
          EXPECT_EQ(got, 0.0) << "uncovered row " << i;
          continue;
        }
        max_err = std::max(max_err, std::abs(got - ref) / (std::abs(ref) + 1e-2));
      }
    }
  EXPECT_LT(max_err, 1.0 / 128);  // one bf16 rounding of the output
}

TEST(BlockSparseAttention, RejectsOverlappingQueryRanges) {
  const Tensor q = random_bf16({8, 1, 8}, 1);
  Tensor o = Tensor::zeros({8, 1, 8}, DType::BF16);
  auto be = make_cpu_backend();
  const Tensor qr = Tensor::from_i32({2, 2}, {0, 4, 2, 6}), kr = Tensor::from_i32({2, 2}, {0, 8, 0, 8});
  EXPECT_TRUE(test::throws_with(
      [&] { be->block_sparse_attention({.q = q, .k = q, .v = q, .o = o, .q_ranges = qr, .k_ranges = kr, .scale = 1}); },
      {"block_sparse_attention", "overlaps"}));
}

// The pairs of the release window (8 x 4 x 4 blocks, radius 2) on a grid with
// partial edge blocks: token a attends token b iff both are video and their
// blocks are within the radius on every axis, or either is not video.
TEST(RefinerAttentionPairs, EqualTheBlockGridMask) {
  RefinerArch arch;
  arch.text_in_channels = 64;
  RefinerWindow win;  // release defaults
  RefinerLayout L{.frames = 11, .height = 9, .width = 26, .audio_len = 0, .text_len = 5};
  const RefinerPlan p = make_refiner_plan(L, arch, win);
  const int64_t n = L.tokens(), nv = L.video_tokens();
  const auto m = mask_of(p.q_ranges, p.k_ranges, n);
  auto block_of = [&](int64_t orig, int axis) {
    const int64_t t = orig / (L.height * L.width), h = (orig / L.width) % L.height, w = orig % L.width;
    return axis == 0 ? t / win.block_t : axis == 1 ? h / win.block_hw : w / win.block_hw;
  };
  int64_t wrong = 0;
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < n; ++b) {
      const int64_t oa = p.token_order[a], ob = p.token_order[b];
      bool want = true;
      if (oa < nv && ob < nv)
        want = std::abs(block_of(oa, 0) - block_of(ob, 0)) <= win.radius_t &&
               std::abs(block_of(oa, 1) - block_of(ob, 1)) <= win.radius_h &&
               std::abs(block_of(oa, 2) - block_of(ob, 2)) <= win.radius_w;
      wrong += (m[a * n + b] != 0) != want;
    }
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace magi2
