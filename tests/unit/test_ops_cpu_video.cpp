// CPU ops of the video codecs (conv3d, activation, upsample_nearest,
// channels_to_time, unpatchify, latent_denorm, frames_to_u8) against float64
// references written here from ops.h / spec magi2-pipeline.md §6.1, §7.1;
// every op is also checked bit-identical between 1 and 2 threads.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "unit/ops_reference.h"

namespace magi2 {
namespace {

struct ConvCase {
  const char* name;
  Shape x;                  // [T, H, W, Ci]
  std::array<int64_t, 4> k;  // Co, kT, kH, kW
  std::array<int, 3> stride, dilation, pf, pb;
  TimePad tp;
};

// Naive float64 conv over the PyTorch-layout weight [Co, Ci, kT, kH, kW]:
// per output the exact sum (without bias), the bias and sum |terms|.
struct ConvRef {
  std::vector<double> acc, bias, abs_sum;
};
ConvRef conv_ref(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCase& c, const Shape& ys) {
  const int64_t T = c.x[0], H = c.x[1], W = c.x[2], Ci = c.x[3];
  const int64_t Co = c.k[0], kT = c.k[1], kH = c.k[2], kW = c.k[3];
  ConvRef out;
  for (int64_t to = 0; to < ys[0]; ++to)
    for (int64_t ho = 0; ho < ys[1]; ++ho)
      for (int64_t wo = 0; wo < ys[2]; ++wo)
        for (int64_t o = 0; o < Co; ++o) {
          double acc = 0, abs_sum = 0;
          for (int64_t kt = 0; kt < kT; ++kt) {
            int64_t ti = to * c.stride[0] + kt * c.dilation[0] - c.pf[0];
            if (c.tp == TimePad::Replicate) ti = std::clamp<int64_t>(ti, 0, T - 1);
            if (ti < 0 || ti >= T) continue;
            for (int64_t kh = 0; kh < kH; ++kh) {
              const int64_t hi = ho * c.stride[1] + kh * c.dilation[1] - c.pf[1];
              if (hi < 0 || hi >= H) continue;
              for (int64_t kw = 0; kw < kW; ++kw) {
                const int64_t wi = wo * c.stride[2] + kw * c.dilation[2] - c.pf[2];
                if (wi < 0 || wi >= W) continue;
                for (int64_t i = 0; i < Ci; ++i) {
                  const double term =
                      at(x, ((ti * H + hi) * W + wi) * Ci + i) * at(w, (((o * Ci + i) * kT + kt) * kH + kh) * kW + kw);
                  acc += term;
                  abs_sum += std::fabs(term);
                }
              }
            }
          }
          out.acc.push_back(acc);
          out.bias.push_back(b.defined() ? at(b, o) : 0.0);
          out.abs_sum.push_back(abs_sum);
        }
  return out;
}

TEST(OpsCpuVideo, Conv3dMatchesFloat64) {
  const std::vector<ConvCase> cases = {
      {"3x3x3 replicate-t", {5, 4, 6, 7}, {5, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, TimePad::Replicate},
      {"time (3,1,1)", {4, 3, 2, 6}, {12, 3, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 0, 0}, {1, 0, 0}, TimePad::Replicate},
      {"causal zeros stride2", {5, 7, 6, 3}, {4, 3, 3, 3}, {1, 2, 2}, {1, 1, 1}, {2, 0, 0}, {0, 1, 1}, TimePad::Zeros},
      {"dilated 2d", {2, 6, 5, 4}, {3, 1, 3, 3}, {1, 1, 1}, {1, 2, 1}, {0, 2, 1}, {0, 2, 1}, TimePad::Zeros},
      {"1x1x1", {3, 2, 3, 20}, {9, 1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, TimePad::Zeros},
  };
  Rng g(41);
  for (const auto& c : cases) {
    for (DType dt : {DType::F32, DType::BF16}) {
      const std::string what = std::string("conv3d ") + c.name + (dt == DType::F32 ? " f32" : " bf16");
      Tensor x = rand_t(c.x, dt, g, -2, 2);
      Tensor w = rand_t({c.k[0], c.x[3], c.k[1], c.k[2], c.k[3]}, dt, g, -0.5, 0.5);
      Tensor b = rand_t({c.k[0]}, dt, g, -1, 1);
      Shape ys(4);
      for (int a = 0; a < 3; ++a)
        ys[a] = (c.x[a] + c.pf[a] + c.pb[a] - c.dilation[a] * (c.k[a + 1] - 1) - 1) / c.stride[a] + 1;
      ys[3] = c.k[0];
      const Tensor wl = conv_weight_channels_last(w, dt);
      auto outs = thread_invariant([&](Backend& be) {
        Tensor y = Tensor::zeros(ys, dt);
        be.conv3d({.x = x, .w = wl, .bias = b, .y = y, .stride = c.stride, .dilation = c.dilation,
                   .pad_front = c.pf, .pad_back = c.pb, .time_pad = c.tp});
        return std::vector<Tensor>{y};
      });
      const ConvRef ref = conv_ref(x, w, b, c, ys);
      ASSERT_EQ(static_cast<int64_t>(ref.acc.size()), outs[0].numel());
      if (dt == DType::F32) {
        // fp32 accumulation: error relative to sum |terms| + |bias|.
        RelCheck ck{what, 2e-6};
        for (size_t i = 0; i < ref.acc.size(); ++i)
          ck.add(at(outs[0], static_cast<int64_t>(i)), ref.acc[i] + ref.bias[i], ref.abs_sum[i] + std::fabs(ref.bias[i]));
        ck.done();
      } else {
        // Two roundings (conv result to bf16, then + bias to bf16): half an ulp
        // of the final value plus half an ulp of the conv result (+ fp32 sum error).
        UlpCheck ck{what, 0.5};
        for (size_t i = 0; i < ref.acc.size(); ++i)
          ck.add(at(outs[0], static_cast<int64_t>(i)), ref.acc[i] + ref.bias[i],
                 0.5 * ulp_ref(ref.acc[i]) + 2e-6 * ref.abs_sum[i]);
        ck.done(0.5);
      }
    }
  }
}

TEST(OpsCpuVideo, Conv3dRejectsBadShapes) {
  auto be = make_cpu_backend(1);
  Tensor x = Tensor::zeros({2, 3, 3, 4}, DType::F32);
  Tensor w = Tensor::zeros({5, 3, 3, 3, 4}, DType::F32);
  Tensor y = Tensor::zeros({2, 3, 3, 5}, DType::F32);
  EXPECT_TRUE(throws_with([&] { be->conv3d({.x = x, .w = w, .y = y}); }, {"conv3d", "smaller than the kernel"}));
  Tensor wrong_ci = Tensor::zeros({5, 1, 1, 1, 3}, DType::F32);
  EXPECT_TRUE(throws_with([&] { be->conv3d({.x = x, .w = wrong_ci, .y = y}); }, {"conv3d.w", "C_in"}));
  Tensor ok_w = Tensor::zeros({5, 1, 1, 1, 4}, DType::F32);
  Tensor y_bad = Tensor::zeros({2, 3, 4, 5}, DType::F32);
  EXPECT_TRUE(throws_with([&] { be->conv3d({.x = x, .w = ok_w, .y = y_bad}); }, {"conv3d.y"}));
  EXPECT_TRUE(throws_with([&] { be->conv3d({.x = x, .w = ok_w.to(DType::BF16), .y = y}); }, {"conv3d", "dtype"}));
}

TEST(OpsCpuVideo, ActivationSiluRelu) {
  Rng g(42);
  Tensor xb = rand_t({5, 12}, DType::BF16, g, -6, 6);
  Tensor x = xb.slice_cols(1, 11);
  for (Activation k : {Activation::SiLU, Activation::ReLU}) {
    auto outs = thread_invariant([&](Backend& be) {
      Tensor y = Tensor::zeros({5, 10}, DType::BF16);
      be.activation({.x = x, .y = y, .kind = k});
      return std::vector<Tensor>{y};
    });
    UlpCheck ck{k == Activation::SiLU ? "silu bf16" : "relu bf16", 0.5};
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < 10; ++c) {
        const double v = at(x, r, c);
        ck.add(at(outs[0], r, c), k == Activation::SiLU ? v * sigmoid_ref(v) : std::max(v, 0.0), 1e-7);
      }
    ck.done(0.95);
  }
}

TEST(OpsCpuVideo, UpsampleChannelsToTimeUnpatchify) {
  auto be = make_cpu_backend(2);
  // upsample: [1, 2, 2, 1] -> [1, 4, 6, 1] (factors 2, 3)
  Tensor x = Tensor::from_f32({1, 2, 2, 1}, {1, 2, 3, 4});
  Tensor y = Tensor::zeros({1, 4, 6, 1}, DType::F32);
  be->upsample_nearest({.x = x, .y = y, .factor_h = 2, .factor_w = 3});
  const std::vector<float> up = {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4};
  for (int i = 0; i < 24; ++i) EXPECT_EQ(y.get_f32(i), up[i]) << i;

  // channels_to_time: 2 frames, 1 pixel, channels (s, c) = s*10 + t*100 + c
  Tensor xc = Tensor::zeros({2, 1, 1, 6}, DType::BF16);
  for (int t = 0; t < 2; ++t)
    for (int s = 0; s < 2; ++s)
      for (int c = 0; c < 3; ++c) xc.data_as<uint16_t>()[t * 6 + s * 3 + c] = f32_to_bf16_bits(100 * t + 10 * s + c);
  for (int drop : {0, 1}) {
    Tensor yc = Tensor::zeros({4 - drop, 1, 1, 3}, DType::BF16);
    be->channels_to_time({.x = xc, .y = yc, .n = 2, .drop_front = drop});
    for (int f = 0; f < 4 - drop; ++f)
      for (int c = 0; c < 3; ++c) {
        const int g2 = f + drop;
        EXPECT_EQ(yc.get_f32(f * 3 + c), 100 * (g2 / 2) + 10 * (g2 % 2) + c);
      }
  }

  // unpatchify, the spec's example: channels [0, 1, 2, 3] -> [[0, 2], [1, 3]].
  Tensor xp = Tensor::from_f32({1, 1, 1, 4}, {0, 1, 2, 3});
  Tensor yp = Tensor::zeros({1, 2, 2, 1}, DType::F32);
  be->unpatchify({.x = xp, .y = yp, .patch = 2});
  EXPECT_EQ(yp.get_f32(0), 0);
  EXPECT_EQ(yp.get_f32(1), 2);
  EXPECT_EQ(yp.get_f32(2), 1);
  EXPECT_EQ(yp.get_f32(3), 3);
  // Two channels, 1x2 positions: y[t, 2h+b, 2w+a, c] = x[t, h, w, c*4 + a*2 + b].
  Tensor xq = Tensor::zeros({1, 1, 2, 8}, DType::F32);
  for (int i = 0; i < 16; ++i) xq.data_as<float>()[i] = static_cast<float>(i);
  Tensor yq = Tensor::zeros({1, 2, 4, 2}, DType::F32);
  be->unpatchify({.x = xq, .y = yq, .patch = 2});
  for (int row = 0; row < 2; ++row)
    for (int col = 0; col < 4; ++col)
      for (int c = 0; c < 2; ++c)
        EXPECT_EQ(yq.get_f32((row * 4 + col) * 2 + c), (col / 2) * 8 + c * 4 + (col % 2) * 2 + row % 2);
}

TEST(OpsCpuVideo, LatentDenormIsExactFp32ThenRounded) {
  Rng g(43);
  const int64_t C = 5, T = 3, H = 2, W = 2;
  Tensor x = rand_t({C, T, H, W}, DType::BF16, g, -3, 3);
  Tensor is = rand_t({C}, DType::F32, g, 0.5, 3);
  Tensor mu = rand_t({C}, DType::F32, g, -0.5, 0.5);
  for (DType dt : {DType::F32, DType::BF16}) {
    auto outs = thread_invariant([&](Backend& be) {
      Tensor y = Tensor::zeros({T, H, W, C}, dt);
      be.latent_denorm({.x = x, .inv_std = is, .mean = mu, .y = y});
      return std::vector<Tensor>{y};
    });
    for (int64_t p = 0; p < T * H * W; ++p)
      for (int64_t c = 0; c < C; ++c) {
        const float v = x.get_f32(c * T * H * W + p) / is.get_f32(c) + mu.get_f32(c);
        EXPECT_EQ(outs[0].get_f32(p * C + c), dt == DType::F32 ? v : round_bf16(v));
      }
  }
}

TEST(OpsCpuVideo, FramesToU8Truncates) {
  auto be = make_cpu_backend(2);
  const std::vector<float> v = {-1.5f, -1.f, -0.999f, 0.f, 0.00392f, 0.5f, 0.99f, 1.f, 2.f, NAN};
  Tensor x = Tensor::from_f32({2, 5}, v);
  Tensor y = Tensor::zeros({2, 5}, DType::U8);
  be->frames_to_u8({.x = x, .y = y});
  for (size_t i = 0; i < v.size(); ++i) {
    float e = v[i] * 0.5f + 0.5f;
    e = std::isnan(e) ? 0.f : std::min(std::max(e, 0.f), 1.f);
    EXPECT_EQ(y.data_as<uint8_t>()[i], static_cast<uint8_t>(e * 255.f)) << v[i];
  }
  EXPECT_EQ(y.data_as<uint8_t>()[5], 191);  // 0.75 * 255 = 191.25 -> 191 (truncation)
}

}  // namespace
}  // namespace magi2
