// Counter-based Gaussian noise: see noise.h for the exact mapping.
#include "pipeline/noise.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace magi2 {

namespace {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
constexpr double kTwoPow32Inv = 1.0 / 4294967296.0;

// The four normals of one Philox block (lanes 0..3 of block `block`).
std::array<float, 4> normal_block(uint64_t seed, uint64_t stream, uint64_t block) {
  const std::array<uint32_t, 4> ctr = {
      static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
      static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  const std::array<uint32_t, 2> key = {static_cast<uint32_t>(seed),
                                       static_cast<uint32_t>(seed >> 32)};
  const std::array<uint32_t, 4> w = philox4x32_10(ctr, key);
  std::array<float, 4> out{};
  for (int p = 0; p < 2; ++p) {
    const double u = (static_cast<double>(w[2 * p]) + 1.0) * kTwoPow32Inv;
    const double v = static_cast<double>(w[2 * p + 1]) * kTwoPow32Inv;
    const double r = std::sqrt(-2.0 * std::log(u));
    const double theta = 2.0 * std::numbers::pi * v;
    out[2 * p] = static_cast<float>(r * std::cos(theta));
    out[2 * p + 1] = static_cast<float>(r * std::sin(theta));
  }
  return out;
}

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kPhiloxW0;
      k[1] += kPhiloxW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

float philox_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  return normal_block(seed, stream, index / 4)[index % 4];
}

void fill_normal(uint64_t seed, uint64_t stream, uint64_t begin, std::span<float> out) {
  const uint64_t n = out.size();
  MAGI2_CHECK(n <= std::numeric_limits<uint64_t>::max() - begin, "fill_normal: range [", begin,
              ", +", n, ") overflows the 64-bit element index");
  if (n == 0) return;
  const uint64_t end = begin + n;
  const uint64_t first_block = begin / 4;
  const uint64_t last_block = (end - 1) / 4;
  const int64_t num_blocks = static_cast<int64_t>(last_block - first_block + 1);
  // Blocks are independent, so the parallel split cannot change any value.
#pragma omp parallel for schedule(static) if (num_blocks > 4096)
  for (int64_t bi = 0; bi < num_blocks; ++bi) {
    const uint64_t b = first_block + static_cast<uint64_t>(bi);
    const std::array<float, 4> z = normal_block(seed, stream, b);
    const uint64_t lo = std::max(b * 4, begin);
    const uint64_t hi = std::min(b * 4 + 4, end);
    for (uint64_t i = lo; i < hi; ++i) out[i - begin] = z[i - b * 4];
  }
}

Tensor randn_philox(const Shape& shape, uint64_t seed, uint64_t stream) {
  for (int64_t d : shape) {
    MAGI2_CHECK(d >= 0, "randn_philox: negative dimension in shape ", shape_str(shape));
  }
  Tensor t = Tensor::empty(shape, DType::F32);
  fill_normal(seed, stream, 0,
              std::span<float>(t.data_as<float>(), static_cast<size_t>(t.numel())));
  return t;
}

}  // namespace magi2
