// Element-wise and layout ops of the video codecs (ops.h: activation,
// upsample_nearest, channels_to_time, unpatchify, latent_denorm,
// frames_to_u8). Pure data movement is bit-exact; the arithmetic ones follow
// the rounding points in their docstrings. OpenMP over rows/frames.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"

namespace magi2::cpu {
namespace {

void check_4d(const Tensor& t, const char* what) {
  MAGI2_CHECK(t.defined() && t.device() == Device::CPU, what, ": expected a CPU tensor");
  MAGI2_CHECK(t.dim() == 4 && t.is_contiguous(), what, ": expected a contiguous [T, H, W, C] tensor, got ",
              shape_str(t.shape()));
}

void check_float(const Tensor& t, const char* what) {
  MAGI2_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16, what, ": expected f32 or bf16");
}

}  // namespace

void activation(const ActivationParams& p) {
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  check_2d(p.x, rows, cols, "activation.x");
  check_2d(p.y, rows, cols, "activation.y");
  check_float(p.x, "activation.x");
  MAGI2_CHECK(p.y.dtype() == p.x.dtype(), "activation: x and y must share one dtype");
#pragma omp parallel
  {
    std::vector<float> v(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row_f32(p.x, r, cols, v.data());
      if (p.kind == Activation::SiLU) {
        for (auto& e : v) e = e / (1.0f + std::exp(-e));
      } else {
        for (auto& e : v) e = e < 0.f ? 0.f : e;  // NaN propagates, as torch.relu
      }
      store_row(p.y, r, cols, v.data());
    }
  }
}

void upsample_nearest(const UpsampleNearestParams& p) {
  check_4d(p.x, "upsample_nearest.x");
  check_4d(p.y, "upsample_nearest.y");
  MAGI2_CHECK(p.factor_h >= 1 && p.factor_w >= 1, "upsample_nearest: factors must be >= 1");
  const int64_t T = p.x.size(0), H = p.x.size(1), W = p.x.size(2), C = p.x.size(3);
  check_tensor(p.y, {T, H * p.factor_h, W * p.factor_w, C}, p.x.dtype(), "upsample_nearest.y");
  const size_t px = static_cast<size_t>(C) * dtype_size(p.x.dtype());
  const int64_t Ho = H * p.factor_h, Wo = W * p.factor_w;
  const char* x = static_cast<const char*>(p.x.data());
  char* y = static_cast<char*>(p.y.data());
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < T * Ho; ++r) {
    const int64_t t = r / Ho, hi = (r % Ho) / p.factor_h;
    for (int64_t wo = 0; wo < Wo; ++wo)
      std::memcpy(y + (r * Wo + wo) * px, x + ((t * H + hi) * W + wo / p.factor_w) * px, px);
  }
}

void channels_to_time(const ChannelsToTimeParams& p) {
  check_4d(p.x, "channels_to_time.x");
  check_4d(p.y, "channels_to_time.y");
  const int64_t T = p.x.size(0), H = p.x.size(1), W = p.x.size(2);
  MAGI2_CHECK(p.n >= 1 && p.x.size(3) % p.n == 0, "channels_to_time: ", p.x.size(3), " channels do not split into ",
              p.n, " groups");
  const int64_t C = p.x.size(3) / p.n;
  MAGI2_CHECK(p.drop_front >= 0 && p.drop_front <= T * p.n, "channels_to_time: bad drop_front ", p.drop_front);
  check_tensor(p.y, {T * p.n - p.drop_front, H, W, C}, p.x.dtype(), "channels_to_time.y");
  const size_t es = dtype_size(p.x.dtype());
  const char* x = static_cast<const char*>(p.x.data());
  char* y = static_cast<char*>(p.y.data());
  const int64_t frames_out = T * p.n - p.drop_front, hw = H * W;
#pragma omp parallel for schedule(static)
  for (int64_t f = 0; f < frames_out; ++f) {
    const int64_t g = f + p.drop_front, t = g / p.n, s = g % p.n;
    for (int64_t i = 0; i < hw; ++i)
      std::memcpy(y + (f * hw + i) * C * es, x + ((t * hw + i) * p.n * C + s * C) * es, C * es);
  }
}

void unpatchify(const UnpatchifyParams& p) {
  check_4d(p.x, "unpatchify.x");
  check_4d(p.y, "unpatchify.y");
  const int64_t T = p.x.size(0), H = p.x.size(1), W = p.x.size(2), pp = int64_t{p.patch} * p.patch;
  MAGI2_CHECK(p.patch >= 1 && p.x.size(3) % pp == 0, "unpatchify: ", p.x.size(3), " channels are not C*", p.patch,
              "*", p.patch);
  const int64_t C = p.x.size(3) / pp, P = p.patch;
  check_tensor(p.y, {T, H * P, W * P, C}, p.x.dtype(), "unpatchify.y");
  const size_t es = dtype_size(p.x.dtype());
  const char* x = static_cast<const char*>(p.x.data());
  char* y = static_cast<char*>(p.y.data());
  const int64_t Ho = H * P, Wo = W * P;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < T * Ho; ++r) {
    const int64_t t = r / Ho, yo = r % Ho, h = yo / P, b = yo % P;
    for (int64_t xo = 0; xo < Wo; ++xo) {
      const int64_t w = xo / P, a = xo % P;
      const char* src = x + ((t * H + h) * W + w) * C * pp * es;
      char* dst = y + (r * Wo + xo) * C * es;
      for (int64_t c = 0; c < C; ++c) std::memcpy(dst + c * es, src + (c * pp + a * P + b) * es, es);
    }
  }
}

void latent_denorm(const LatentDenormParams& p) {
  MAGI2_CHECK(p.x.defined() && p.x.dim() == 4 && p.x.is_contiguous(), "latent_denorm.x: expected contiguous [C, T, H, W]");
  check_4d(p.y, "latent_denorm.y");
  check_float(p.x, "latent_denorm.x");
  check_float(p.y, "latent_denorm.y");
  const int64_t C = p.x.size(0), T = p.x.size(1), H = p.x.size(2), W = p.x.size(3);
  check_tensor(p.y, {T, H, W, C}, p.y.dtype(), "latent_denorm.y");
  check_tensor(p.inv_std, {C}, DType::F32, "latent_denorm.inv_std");
  check_tensor(p.mean, {C}, DType::F32, "latent_denorm.mean");
  const float* is = p.inv_std.data_as<float>();
  const float* mu = p.mean.data_as<float>();
  const int64_t pos = T * H * W;
  const Tensor y2 = p.y.reshape({pos, C});
#pragma omp parallel
  {
    std::vector<float> v(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < pos; ++i) {
      for (int64_t c = 0; c < C; ++c) v[c] = p.x.get_f32(c * pos + i) / is[c] + mu[c];
      store_row(y2, i, C, v.data());
    }
  }
}

void frames_to_u8(const FramesToU8Params& p) {
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  check_2d(p.x, rows, cols, "frames_to_u8.x");
  check_2d(p.y, rows, cols, "frames_to_u8.y");
  check_float(p.x, "frames_to_u8.x");
  MAGI2_CHECK(p.y.dtype() == DType::U8, "frames_to_u8.y: expected u8");
#pragma omp parallel
  {
    std::vector<float> v(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row_f32(p.x, r, cols, v.data());
      uint8_t* y = reinterpret_cast<uint8_t*>(row_ptr(p.y, r));
      for (int64_t c = 0; c < cols; ++c) {
        float e = v[c] * 0.5f;
        e = e + 0.5f;
        e = std::min(std::max(e, 0.0f), 1.0f);
        y[c] = std::isnan(e) ? 0 : static_cast<uint8_t>(e * 255.0f);  // NaN: 0 rather than UB
      }
    }
  }
}

}  // namespace magi2::cpu
