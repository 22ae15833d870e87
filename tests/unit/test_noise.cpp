// Counter-based initial noise (pipeline/noise.h): Philox known answers,
// determinism, split invariance, stream/seed separation, distribution sanity.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "pipeline/noise.h"

namespace magi2 {
namespace {

TEST(Noise, PhiloxKnownAnswers) {
  // Random123 kat_vectors, "philox4x32 10" lines (counter, key -> output).
  using A4 = std::array<uint32_t, 4>;
  using A2 = std::array<uint32_t, 2>;
  EXPECT_EQ(philox4x32_10(A4{0, 0, 0, 0}, A2{0, 0}),
            (A4{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10(A4{~0u, ~0u, ~0u, ~0u}, A2{~0u, ~0u}),
            (A4{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10(A4{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                          A2{0xa4093822u, 0x299f31d0u}),
            (A4{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Noise, MappingMatchesHeader) {
  // Element i = lane i%4 of block i/4, Box-Muller as documented.
  const uint64_t seed = 0x123456789abcdefull, stream = kNoiseStreamAudio;
  for (uint64_t i : {0ull, 1ull, 2ull, 3ull, 4ull, 4097ull, (1ull << 33) + 2}) {
    const uint64_t b = i / 4;
    const auto w = philox4x32_10({static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32),
                                  static_cast<uint32_t>(stream),
                                  static_cast<uint32_t>(stream >> 32)},
                                 {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
    const int lane = static_cast<int>(i % 4), pair = lane / 2;
    const double u = (w[2 * pair] + 1.0) / 4294967296.0;
    const double v = w[2 * pair + 1] / 4294967296.0;
    const double r = std::sqrt(-2.0 * std::log(u)), th = 2.0 * std::numbers::pi * v;
    const float expect = static_cast<float>(lane % 2 == 0 ? r * std::cos(th) : r * std::sin(th));
    EXPECT_EQ(philox_normal(seed, stream, i), expect) << "index " << i;
  }
}

TEST(Noise, Deterministic) {
  const Tensor a = randn_philox({1, 48, 3, 4, 5}, 42, kNoiseStreamVideo);
  const Tensor b = randn_philox({1, 48, 3, 4, 5}, 42, kNoiseStreamVideo);
  ASSERT_EQ(a.dtype(), DType::F32);
  ASSERT_EQ(a.shape(), (Shape{1, 48, 3, 4, 5}));
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
  // Same flat index, same value, whatever the shape.
  const Tensor c = randn_philox({2880}, 42, kNoiseStreamVideo);
  EXPECT_EQ(std::memcmp(a.data(), c.data(), a.nbytes()), 0);
}

TEST(Noise, SplitInvariance) {
  const uint64_t seed = 7, n = 10007;  // odd size: ragged last block
  std::vector<float> full(n);
  fill_normal(seed, kNoiseStreamVideo, 0, full);
  // Contiguous splits over "ranks", with boundaries inside Philox blocks.
  for (uint64_t parts : {2ull, 3ull, 7ull, 16ull}) {
    for (uint64_t r = 0; r < parts; ++r) {
      const uint64_t a = n * r / parts, b = n * (r + 1) / parts;
      std::vector<float> piece(b - a);
      fill_normal(seed, kNoiseStreamVideo, a, piece);
      EXPECT_EQ(std::memcmp(piece.data(), full.data() + a, piece.size() * 4), 0)
          << "parts " << parts << " rank " << r << " [" << a << ", " << b << ")";
    }
  }
  // Every tiny window, and single elements.
  for (uint64_t a = 0; a < 12; ++a) {
    for (uint64_t len = 0; len < 9; ++len) {
      std::vector<float> piece(len);
      fill_normal(seed, kNoiseStreamVideo, a, piece);
      for (uint64_t k = 0; k < len; ++k) EXPECT_EQ(piece[k], full[a + k]);
    }
    EXPECT_EQ(philox_normal(seed, kNoiseStreamVideo, a), full[a]);
  }
  // Large begin (beyond 2^32 blocks) works and agrees with the scalar form.
  std::vector<float> far(5);
  const uint64_t base = (1ull << 36) + 3;
  fill_normal(seed, kNoiseStreamVideo, base, far);
  for (uint64_t k = 0; k < far.size(); ++k)
    EXPECT_EQ(far[k], philox_normal(seed, kNoiseStreamVideo, base + k));
  std::vector<float> overflow(2);
  EXPECT_THROW(fill_normal(seed, kNoiseStreamVideo, ~0ull, overflow), Error);
  EXPECT_THROW(randn_philox({2, -1}, seed, kNoiseStreamVideo), Error);
}

TEST(Noise, StreamsAndSeedsDiffer) {
  const int n = 4096;
  const Tensor v = randn_philox({n}, 42, kNoiseStreamVideo);
  const Tensor a = randn_philox({n}, 42, kNoiseStreamAudio);
  const Tensor s = randn_philox({n}, 43, kNoiseStreamVideo);
  int same_va = 0, same_vs = 0;
  double dot_va = 0;
  for (int i = 0; i < n; ++i) {
    same_va += v.get_f32(i) == a.get_f32(i);
    same_vs += v.get_f32(i) == s.get_f32(i);
    dot_va += static_cast<double>(v.get_f32(i)) * a.get_f32(i);
  }
  EXPECT_EQ(same_va, 0);
  EXPECT_EQ(same_vs, 0);
  EXPECT_LT(std::fabs(dot_va / n), 5.0 / std::sqrt(n));  // uncorrelated streams
}

TEST(Noise, DistributionSanity) {
  const uint64_t n = 1u << 20;
  std::vector<float> x(n);
  fill_normal(2024, kNoiseStreamVideo, 0, x);
  double s1 = 0, s2 = 0, s3 = 0, s4 = 0, lag = 0;
  uint64_t beyond3 = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const double v = x[i];
    ASSERT_TRUE(std::isfinite(v));
    ASSERT_LT(std::fabs(v), 6.7);
    s1 += v;
    s2 += v * v;
    s3 += v * v * v;
    s4 += v * v * v * v;
    if (i > 0) lag += v * x[i - 1];
    beyond3 += std::fabs(v) > 3.0;
  }
  const double N = static_cast<double>(n);
  const double mean = s1 / N, var = s2 / N - mean * mean;
  // ~5 standard errors: mean 1/sqrt(N), variance sqrt(2/N), skew sqrt(15/N), kurt sqrt(96/N).
  EXPECT_LT(std::fabs(mean), 5.0 / std::sqrt(N));
  EXPECT_LT(std::fabs(var - 1.0), 5.0 * std::sqrt(2.0 / N));
  EXPECT_LT(std::fabs(s3 / N), 5.0 * std::sqrt(15.0 / N));
  EXPECT_LT(std::fabs(s4 / N - 3.0), 5.0 * std::sqrt(96.0 / N));
  EXPECT_LT(std::fabs(lag / N), 5.0 / std::sqrt(N));  // neighbours (incl. Box-Muller pairs)
  const double p3 = static_cast<double>(beyond3) / N;  // expected 0.0026998
  EXPECT_NEAR(p3, 0.0026998, 5.0 * std::sqrt(0.0027 / N));
  std::printf("[noise] mean %.2e var %.5f skew %.2e kurt %.4f lag1 %.2e P(|x|>3) %.5f\n", mean,
              var, s3 / N, s4 / N, lag / N, p3);
}

}  // namespace
}  // namespace magi2
