// CPU ops of the Wan2.2 VAE encoder (channel L2 norm, AvgDown3D, fp32 spatial
// attention, channel affine, fp32 add) against float64 references written
// here from spec magi2-pipeline.md §6.3 / official vae2_2.py semantics; every
// op is also checked bit-identical between 1 and 2 threads. Also Backend::copy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "unit/ops_reference.h"

namespace magi2 {
namespace {

TEST(OpsCpuWan, ChannelL2NormWithAndWithoutSilu) {
  Rng g(31);
  const int64_t R = 6, C = 20;
  Tensor xb = rand_t({R, C + 4}, DType::F32, g, -3, 3);
  Tensor x = xb.slice_cols(2, 2 + C);
  for (int64_t c = 0; c < C; ++c) put(x, 3, c, 0.0);  // zero row: the 1e-12 floor keeps it finite (0)
  for (int64_t c = 0; c < C; ++c) put(x, 4, c, at(x, 4, c) * 1e-20);
  Tensor gamma = rand_t({C}, DType::F32, g, 0.5, 1.5);
  for (bool silu : {false, true}) {
    auto outs = thread_invariant([&](Backend& be) {
      Tensor y = Tensor::zeros({R, C}, DType::F32);
      be.channel_l2_norm({.x = x, .gamma = gamma, .y = y, .silu = silu});
      return std::vector<Tensor>{y};
    });
    RelCheck ck{silu ? "channel_l2_norm+silu" : "channel_l2_norm", 1e-6};
    for (int64_t r = 0; r < R; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += at(x, r, c) * at(x, r, c);
      const double denom = std::max(std::sqrt(ss), 1e-12);
      for (int64_t c = 0; c < C; ++c) {
        double v = at(x, r, c) / denom * std::sqrt(static_cast<double>(C)) * at(gamma, c);
        if (silu) v = v * sigmoid_ref(v);
        ck.add(at(outs[0], r, c), v, std::max(std::fabs(v), 1e-30));
      }
    }
    ck.done();
  }
}

TEST(OpsCpuWan, AvgDown3dFoldsTimeAndSpace) {
  Rng g(32);
  // T = 3 with factor_t 2: one zero frame in front; 8 input channels -> 16 out (groups of 4).
  const int64_t T = 3, H = 4, W = 6, Ci = 8, Co = 16, ft = 2, fs = 2;
  Tensor x = rand_t({T, H, W, Ci}, DType::F32, g, -2, 2);
  auto outs = thread_invariant([&](Backend& be) {
    Tensor y = Tensor::zeros({2, H / fs, W / fs, Co}, DType::F32);
    be.avg_down3d({.x = x, .y = y, .factor_t = ft, .factor_s = fs});
    return std::vector<Tensor>{y};
  });
  const int64_t G = Ci * ft * fs * fs / Co, pad = 1;
  RelCheck ck{"avg_down3d", 1e-6};
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t h = 0; h < H / fs; ++h)
      for (int64_t w = 0; w < W / fs; ++w)
        for (int64_t o = 0; o < Co; ++o) {
          double sum = 0, mag = 0;
          for (int64_t k = 0; k < G; ++k) {
            const int64_t f = o * G + k;  // flat (c, it, ih, iw), iw fastest
            const int64_t c = f / (ft * fs * fs), it = f / (fs * fs) % ft, ih = f / fs % fs, iw = f % fs;
            const int64_t ti = t * ft + it - pad;
            if (ti < 0) continue;
            const double v = at(x, ((ti * H + h * fs + ih) * W + w * fs + iw) * Ci + c);
            sum += v;
            mag += std::fabs(v);
          }
          ck.add(at(outs[0], ((t * (H / fs) + h) * (W / fs) + w) * Co + o), sum / G, mag / G + 1e-30);
        }
  ck.done();
  // Identity when nothing folds (the last encoder stage).
  auto be = make_cpu_backend(1);
  Tensor y = Tensor::zeros({T, H, W, Ci}, DType::F32);
  be->avg_down3d({.x = x, .y = y, .factor_t = 1, .factor_s = 1});
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0);
  EXPECT_TRUE(throws_with([&] { be->avg_down3d({.x = x, .y = Tensor::zeros({T, H, W, 5}, DType::F32)}); },
                          {"avg_down3d"}));
}

TEST(OpsCpuWan, SpatialAttentionBlocks) {
  Rng g(33);
  const int64_t R = 12, C = 8, block = 6;
  Tensor qkv = rand_t({R, 3 * C}, DType::F32, g, -2, 2);
  Tensor q = qkv.slice_cols(0, C), k = qkv.slice_cols(C, 2 * C), v = qkv.slice_cols(2 * C, 3 * C);
  const float scale = 1.0f / std::sqrt(8.0f);
  auto outs = thread_invariant([&](Backend& be) {
    Tensor o = Tensor::zeros({R, C}, DType::F32);
    be.spatial_attention({.q = q, .k = k, .v = v, .o = o, .block_rows = block, .scale = scale});
    return std::vector<Tensor>{o};
  });
  RelCheck ck{"spatial_attention", 2e-6};
  for (int64_t i = 0; i < R; ++i) {
    const int64_t b0 = i / block * block;
    std::vector<double> s(block);
    double mx = -kInf, den = 0;
    for (int64_t j = 0; j < block; ++j) {
      double d = 0;
      for (int64_t c = 0; c < C; ++c) d += at(q, i, c) * at(k, b0 + j, c);
      s[j] = d * scale;
      mx = std::max(mx, s[j]);
    }
    for (auto& e : s) den += (e = std::exp(e - mx));
    for (int64_t c = 0; c < C; ++c) {
      double o = 0, mag = 0;
      for (int64_t j = 0; j < block; ++j) {
        o += s[j] / den * at(v, b0 + j, c);
        mag += s[j] / den * std::fabs(at(v, b0 + j, c));
      }
      ck.add(at(outs[0], i, c), o, mag);
    }
  }
  ck.done();
  auto be = make_cpu_backend(1);
  EXPECT_TRUE(throws_with(
      [&] { be->spatial_attention({.q = q, .k = k, .v = v, .o = Tensor::zeros({R, C}, DType::F32), .block_rows = 5}); },
      {"spatial_attention", "blocks of 5"}));
}

TEST(OpsCpuWan, ChannelAffineAndF32Add) {
  Rng g(34);
  const int64_t R = 4, C = 6;
  Tensor xb = rand_t({R, 2 * C}, DType::F32, g, -3, 3);
  Tensor x = xb.slice_cols(0, C);
  Tensor shift = rand_t({C}, DType::F32, g, -0.5, 0.5), mul = rand_t({C}, DType::F32, g, 0.5, 2);
  auto outs = thread_invariant([&](Backend& be) {
    Tensor y = Tensor::zeros({R, C}, DType::F32), s = Tensor::zeros({R, C}, DType::F32);
    be.channel_affine({.x = x, .shift = shift, .mul = mul, .y = y});
    be.add({.a = x, .b = y, .out = s});
    return std::vector<Tensor>{y, s};
  });
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      // Both are single fp32 operations: exact against fp32 evaluation.
      const float want = (static_cast<float>(at(x, r, c)) - static_cast<float>(at(shift, c))) *
                         static_cast<float>(at(mul, c));
      EXPECT_EQ(at(outs[0], r, c), want);
      EXPECT_EQ(at(outs[1], r, c), static_cast<float>(at(x, r, c)) + want);
    }
  auto be = make_cpu_backend(1);
  Tensor bf = Tensor::zeros({R, C}, DType::BF16);
  EXPECT_TRUE(throws_with([&] { be->add({.a = x, .b = bf, .out = bf}); }, {"add", "all-f32"}));
}

// Backend::copy on the CPU (the op that moves tensors between devices on a GPU
// backend): contiguous and row-strided views, bytes unchanged, mismatches refused.
TEST(OpsCpuCopy, CopiesContiguousAndRowStridedViews) {
  auto be = make_cpu_backend(1);
  Tensor a = Tensor::from_f32({3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Tensor b = Tensor::zeros({3, 4}, DType::F32);
  be->copy({.src = a, .dst = b});
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
  Tensor c = Tensor::zeros({3, 2}, DType::F32);
  be->copy({.src = a.slice_cols(1, 3), .dst = c});
  EXPECT_EQ(at(c, 2, 0), 10.0);
  EXPECT_EQ(at(c, 2, 1), 11.0);
  be->copy({.src = c, .dst = b.slice_cols(2, 4)});
  EXPECT_EQ(at(b, 1, 2), 6.0);
  EXPECT_EQ(at(b, 1, 1), 6.0);
  EXPECT_TRUE(throws_with([&] { be->copy({.src = a, .dst = c}); }, {"copy", "does not match"}));
}

}  // namespace
}  // namespace magi2
