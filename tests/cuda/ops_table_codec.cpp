// The codec ops' rows of the backend op table (ops_table.h): the Stable Audio
// Open (Oobleck) decoder's conv1d, conv_transpose1d and SnakeBeta at the
// release widths (spec magi2-pipeline.md §6.2: latent 64, channels 128 x
// [1, 2, 4, 8, 16], strides 2, 4, 4, 8, 8, residual units k7 with dilation 1,
// 3, 9, then k1) on short lengths where the CPU reference stays cheap; the
// TurboVAE decoder's conv3d (k3, replicated edge frames in time; 3x1x1, 1x3x3) and
// layout ops (§6.1) and the Wan2.2 encoder's ops (§6.3) on small frames; plus
// odd widths (channels not multiples of the kernel tiles, taps fewer than the
// stride). The CUDA kernels sum in the CPU's order, so every op is bit-exact
// but SnakeBeta, whose device sine may be an ulp from libm's.
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "cuda/backend_cuda.h"
#include "ops_table.h"

namespace magi2::test {

namespace {

constexpr DType kF32 = DType::F32;
constexpr DType kBf16 = DType::BF16;

const char* dt_name(DType dt) { return dt == kBf16 ? "bf16" : "f32"; }

// x [lin, cin] -> y [lout, cout]; weights scaled by 1/sqrt(K cin) so outputs stay O(1).
OpEntry conv1d_entry(int64_t lin, int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t pad, int64_t dil,
                     bool bias, bool residual) {
  const int64_t lout = (lin + 2 * pad - dil * (k - 1) - 1) / stride + 1;
  const std::string s = str_cat(lin, "x", cin, " -> ", lout, "x", cout, ", k", k, " stride ", stride, " pad ", pad,
                                " dilation ", dil, bias ? ", bias" : "", residual ? ", residual in place" : "");
  const double flops = 2.0 * static_cast<double>(lout) * cout * k * cin;
  return {"conv1d", s, exact(), flops, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const float ws = 1.f / std::sqrt(static_cast<float>(k * cin));
            Conv1dParams p{.x = b.in(b.uniform({lin, cin}, kF32, -2.f, 2.f)),
                           .w = b.in(b.uniform({k, cin, cout}, kF32, -ws, ws)),
                           .stride = stride, .padding = pad, .dilation = dil};
            if (bias) p.bias = b.in(b.uniform({cout}, kF32, -0.5f, 0.5f));
            if (residual) {
              p.y = b.inout(b.uniform({lout, cout}, kF32, -1.f, 1.f));
              p.residual = p.y;
            } else {
              p.y = b.out({lout, cout}, kF32);
            }
            return b.done([&be, p] { be.conv1d(p); });
          }};
}

OpEntry conv_transpose1d_entry(int64_t lin, int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t pad,
                               bool bias) {
  const int64_t lout = (lin - 1) * stride - 2 * pad + k;
  const std::string s = str_cat(lin, "x", cin, " -> ", lout, "x", cout, ", k", k, " stride ", stride, " pad ", pad,
                                bias ? ", bias" : "");
  const double flops = 2.0 * static_cast<double>(lin) * cin * k * cout;
  return {"conv_transpose1d", s, exact(), flops, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const float ws = 1.f / std::sqrt(static_cast<float>(cin));
            ConvTranspose1dParams p{.x = b.in(b.uniform({lin, cin}, kF32, -2.f, 2.f)),
                                    .w = b.in(b.uniform({k, cin, cout}, kF32, -ws, ws)),
                                    .y = b.out({lout, cout}, kF32), .stride = stride, .padding = pad};
            if (bias) p.bias = b.in(b.uniform({cout}, kF32, -0.5f, 0.5f));
            return b.done([&be, p] { be.conv_transpose1d(p); });
          }};
}

// The device sine (double, rounded) vs libm's sinf: within an ulp of sin, times 2 sin / beta (up to
// e = 2.7 with log-scale beta) in absolute terms: an output near zero sees it as many of its own ulps
// (96 measured on the H200), so the bound is absolute-relative, not in ulps.
OpEntry snake_entry(int64_t rows, int64_t cols, bool logscale, bool in_place) {
  const std::string s =
      str_cat(rows, "x", cols, logscale ? ", log-scale" : ", linear", in_place ? ", in place" : "");
  return {"snake_beta", s, rel_rms(1e-6, 2e-6), 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            SnakeBetaParams p{.alpha = b.in(b.uniform({cols}, kF32, logscale ? -1.f : 0.2f, logscale ? 1.f : 3.f)),
                              .beta = b.in(b.uniform({cols}, kF32, logscale ? -1.f : 0.2f, logscale ? 1.f : 3.f)),
                              .logscale = logscale};
            if (in_place) {
              p.x = b.inout(b.uniform({rows, cols}, kF32, -4.f, 4.f));
              p.y = p.x;
            } else {
              p.x = b.in(b.uniform({rows, cols}, kF32, -4.f, 4.f));
              p.y = b.out({rows, cols}, kF32);
            }
            return b.done([&be, p] { be.snake_beta(p); });
          }};
}

// x [T, H, W, ci] -> y with kernel (kt, k, k), stride (1, s, s), pad (front_t, k/2, k/2) / (back_t, k/2, k/2).
OpEntry conv3d_entry(int64_t T, int64_t H, int64_t W, int64_t ci, int64_t co, int kt, int k, int s, int front_t,
                     int back_t, TimePad tp, bool bias, DType dt, bool cudnn = false) {
  const int ph = k / 2;
  const int64_t to = T + front_t + back_t - (kt - 1), ho = (H + 2 * ph - k) / s + 1, wo = (W + 2 * ph - k) / s + 1;
  const std::string str = str_cat(T, "x", H, "x", W, "x", ci, " -> ", to, "x", ho, "x", wo, "x", co, " ",
                                  dt_name(dt), ", k", kt, "x", k, "x", k, " stride ", s,
                                  tp == TimePad::Replicate ? ", replicate" : ", zeros", " time pad ", front_t, "/",
                                  back_t, bias ? ", bias" : "", cudnn ? ", cuDNN" : "");
  // cuDNN sums in its own order: a flipped bf16 rounding of the conv result here and there.
  const Tolerance tol = cudnn ? rel_rms(3e-3, 1.0 / 64, true) : exact();
  const double flops = 2.0 * static_cast<double>(to * ho * wo) * co * kt * k * k * ci;
  return {"conv3d", str, tol, flops, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const float ws = 1.f / std::sqrt(static_cast<float>(kt * k * k * ci));
            Conv3dParams p{.x = b.in(b.uniform({T, H, W, ci}, dt, -2.f, 2.f)),
                           .w = b.in(b.uniform({co, kt, k, k, ci}, dt, -ws, ws)),
                           .y = b.out({to, ho, wo, co}, dt),
                           .stride = {1, s, s},
                           .pad_front = {front_t, ph, ph},
                           .pad_back = {back_t, ph, ph},
                           .time_pad = tp};
            if (bias) p.bias = b.in(b.uniform({co}, dt, -0.5f, 0.5f));
            return b.done([&be, p, cudnn] {
              if (cudnn && be.device() == Device::CUDA)
                MAGI2_CHECK(cuda_conv3d_cudnn(be, p), "conv3d: cuDNN did not take ", shape_str(p.x.shape()));
              else if (be.device() == Device::CUDA)
                cuda_conv3d_own(be, p);  // the bit-exact kernel, whatever the default
              else
                be.conv3d(p);
            });
          }};
}

OpEntry activation_entry(int64_t rows, int64_t cols, Activation kind, DType dt) {
  const std::string s = str_cat(rows, "x", cols, " ", dt_name(dt), kind == Activation::SiLU ? " SiLU" : " ReLU",
                                ", in place");
  return {"activation", s, exact(), 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            Tensor x = b.inout(b.uniform({rows, cols}, dt, -8.f, 8.f));
            const ActivationParams p{.x = x, .y = x, .kind = kind};
            return b.done([&be, p] { be.activation(p); });
          }};
}

// The TurboVAE layout ops on one small video [T, H, W, C].
std::vector<OpEntry> video_layout_entries(int64_t T, int64_t H, int64_t W, int64_t C, DType dt) {
  const std::string v = str_cat(T, "x", H, "x", W, "x", C, " ", dt_name(dt));
  std::vector<OpEntry> e;
  e.push_back({"upsample_nearest", v + ", x2", exact(), 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const UpsampleNearestParams p{.x = b.in(b.uniform({T, H, W, C}, dt, -2.f, 2.f)),
                                               .y = b.out({T, 2 * H, 2 * W, C}, dt)};
                 return b.done([&be, p] { be.upsample_nearest(p); });
               }});
  e.push_back({"channels_to_time", v + " (2 groups), first frame dropped", exact(), 0,
               [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const ChannelsToTimeParams p{.x = b.in(b.uniform({T, H, W, 2 * C}, dt, -2.f, 2.f)),
                                              .y = b.out({2 * T - 1, H, W, C}, dt), .n = 2, .drop_front = 1};
                 return b.done([&be, p] { be.channels_to_time(p); });
               }});
  e.push_back({"unpatchify", v + " (x4 channels), patch 2", exact(), 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const UnpatchifyParams p{.x = b.in(b.uniform({T, H, W, 4 * C}, dt, -2.f, 2.f)),
                                          .y = b.out({T, 2 * H, 2 * W, C}, dt), .patch = 2};
                 return b.done([&be, p] { be.unpatchify(p); });
               }});
  e.push_back({"latent_denorm", str_cat(C, "x", T, "x", H, "x", W, " f32 -> ", dt_name(dt)), exact(), 0,
               [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const LatentDenormParams p{.x = b.in(b.uniform({C, T, H, W}, kF32, -3.f, 3.f)),
                                            .inv_std = b.in(b.uniform({C}, kF32, 0.2f, 3.f)),
                                            .mean = b.in(b.uniform({C}, kF32, -1.f, 1.f)),
                                            .y = b.out({T, H, W, C}, dt)};
                 return b.done([&be, p] { be.latent_denorm(p); });
               }});
  e.push_back({"frames_to_u8", str_cat(T * H * W, "x", C, " ", dt_name(dt), " -> u8, beyond [-1, 1]"), exact(), 0,
               [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const FramesToU8Params p{.x = b.in(b.uniform({T * H * W, C}, dt, -1.2f, 1.2f)),
                                          .y = b.out({T * H * W, C}, DType::U8)};
                 return b.done([&be, p] { be.frames_to_u8(p); });
               }});
  return e;
}

// The Wan2.2 encoder's ops (fp32).
std::vector<OpEntry> wan_entries() {
  std::vector<OpEntry> e;
  for (const bool silu : {false, true})
    e.push_back({"channel_l2_norm", str_cat("4096x384 f32", silu ? " + SiLU" : "", ", in place"), exact(), 0,
                 [=](Backend& be, uint64_t seed) {
                   CaseBuilder b(be, seed);
                   Tensor x = b.inout(b.uniform({4096, 384}, kF32, -3.f, 3.f));
                   const ChannelL2NormParams p{.x = x, .gamma = b.in(b.uniform({384}, kF32, 0.5f, 1.5f)), .y = x,
                                               .silu = silu};
                   return b.done([&be, p] { be.channel_l2_norm(p); });
                 }});
  e.push_back({"avg_down3d", "5x32x48x96 f32 -> 3x16x24x192, factors 2/2 (front-padded frame)", exact(), 0,
               [](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const AvgDown3dParams p{.x = b.in(b.uniform({5, 32, 48, 96}, kF32, -2.f, 2.f)),
                                         .y = b.out({3, 16, 24, 192}, kF32), .factor_t = 2, .factor_s = 2};
                 return b.done([&be, p] { be.avg_down3d(p); });
               }});
  e.push_back({"avg_down3d", "1x16x16x24 f32 -> 1x8x8x48, factors 1/2", exact(), 0, [](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const AvgDown3dParams p{.x = b.in(b.uniform({1, 16, 16, 24}, kF32, -2.f, 2.f)),
                                         .y = b.out({1, 8, 8, 48}, kF32), .factor_t = 1, .factor_s = 2};
                 return b.done([&be, p] { be.avg_down3d(p); });
               }});
  // q, k, v column slices of one qkv buffer, as the encoder's attention block.
  for (const auto& [blocks, n, c] : {std::tuple<int64_t, int64_t, int64_t>{2, 448, 384}, {1, 100, 24}}) {
    const double flops = 4.0 * static_cast<double>(blocks) * n * n * c;
    e.push_back({"spatial_attention", str_cat(blocks, " blocks of ", n, " rows x ", c, " f32, qkv column slices"),
                 exact(), flops, [=](Backend& be, uint64_t seed) {
                   CaseBuilder b(be, seed);
                   Tensor qkv = b.in(b.uniform({blocks * n, 3 * c}, kF32, -1.5f, 1.5f));
                   const SpatialAttentionParams p{.q = qkv.slice_cols(0, c), .k = qkv.slice_cols(c, 2 * c),
                                                  .v = qkv.slice_cols(2 * c, 3 * c), .o = b.out({blocks * n, c}, kF32),
                                                  .block_rows = n,
                                                  .scale = 1.f / std::sqrt(static_cast<float>(c))};
                   return b.done([&be, p] { be.spatial_attention(p); });
                 }});
  }
  e.push_back({"channel_affine", "2048x48 f32, in place", exact(), 0, [](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 Tensor x = b.inout(b.uniform({2048, 48}, kF32, -3.f, 3.f));
                 const ChannelAffineParams p{.x = x, .shift = b.in(b.uniform({48}, kF32, -1.f, 1.f)),
                                             .mul = b.in(b.uniform({48}, kF32, 0.2f, 3.f)), .y = x};
                 return b.done([&be, p] { be.channel_affine(p); });
               }});
  return e;
}

}  // namespace

std::vector<OpEntry> codec_op_entries() {
  std::vector<OpEntry> t;
  // Oobleck decoder (release widths on short lengths).
  t.push_back(conv1d_entry(100, 64, 2048, 7, 1, 3, 1, true, false));      // conv_in
  t.push_back(conv1d_entry(800, 128, 128, 7, 1, 27, 9, true, false));     // residual conv1, dilation 9
  t.push_back(conv1d_entry(800, 128, 128, 1, 1, 0, 1, true, true));       // residual conv2 + skip
  t.push_back(conv1d_entry(800, 128, 2, 7, 1, 3, 1, false, false));       // conv_out, no bias
  t.push_back(conv1d_entry(333, 40, 24, 7, 2, 3, 1, true, false));        // odd widths, stride 2
  t.push_back(conv_transpose1d_entry(25, 2048, 1024, 16, 8, 4, true));    // block 1 upsampler
  t.push_back(conv_transpose1d_entry(77, 40, 20, 4, 2, 1, true));         // odd widths
  t.push_back(conv_transpose1d_entry(50, 24, 16, 3, 4, 0, false));        // taps < stride: empty phases
  t.push_back(snake_entry(4096, 128, true, true));
  t.push_back(snake_entry(333, 24, false, false));
  // TurboVAE decoder: k3 convs with replicated edge frames (2 in front; one
  // each side as TurboVAE's non-causal convs), the upsamplers' time conv
  // (3x1x1) and 2-D 3x3 conv, a zero-padded strided conv; odd widths.
  t.push_back(conv3d_entry(3, 16, 24, 96, 96, 3, 3, 1, 2, 0, TimePad::Replicate, true, kBf16));
  t.push_back(conv3d_entry(2, 16, 16, 64, 128, 3, 1, 1, 2, 0, TimePad::Replicate, true, kBf16));
  t.push_back(conv3d_entry(2, 32, 32, 48, 48, 1, 3, 1, 0, 0, TimePad::Zeros, true, kBf16));
  t.push_back(conv3d_entry(3, 17, 13, 37, 21, 3, 3, 2, 2, 0, TimePad::Zeros, false, kF32));
  t.push_back(conv3d_entry(4, 12, 20, 12, 70, 3, 3, 1, 1, 1, TimePad::Replicate, true, kF32));
  // The same bf16 shapes through cuDNN (MAGI2_CONV_KERNEL=cudnn), and a release-width one.
  t.push_back(conv3d_entry(3, 16, 24, 96, 96, 3, 3, 1, 2, 0, TimePad::Replicate, true, kBf16, true));
  t.push_back(conv3d_entry(2, 16, 16, 64, 128, 3, 1, 1, 2, 0, TimePad::Replicate, true, kBf16, true));
  t.push_back(conv3d_entry(2, 32, 32, 48, 48, 1, 3, 1, 0, 0, TimePad::Zeros, true, kBf16, true));
  t.push_back(conv3d_entry(8, 16, 28, 512, 512, 3, 3, 1, 1, 1, TimePad::Replicate, true, kBf16, false));
  t.push_back(conv3d_entry(8, 16, 28, 512, 512, 3, 3, 1, 1, 1, TimePad::Replicate, true, kBf16, true));
  for (const DType dt : {kBf16, kF32}) {
    t.push_back(activation_entry(2048, 96, Activation::SiLU, dt));
    t.push_back(activation_entry(333, 24, Activation::ReLU, dt));
    for (OpEntry& e : video_layout_entries(3, 12, 20, 24, dt)) t.push_back(std::move(e));
  }
  // Wan2.2 VAE encoder.
  for (OpEntry& e : wan_entries()) t.push_back(std::move(e));
  return t;
}

}  // namespace magi2::test
