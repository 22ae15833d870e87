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
#include "ops/codec_checks.h"
#include "ops/codec_numerics.h"

namespace magi2::cpu {
void activation(const ActivationParams& p) {
  const auto dims = check_activation(p, Device::CPU);
  const int64_t rows = dims[0], cols = dims[1];
#pragma omp parallel
  {
    std::vector<float> v(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row_f32(p.x, r, cols, v.data());
      if (p.kind == Activation::SiLU) {
        for (auto& e : v) e = text_silu(e);
      } else {
        for (auto& e : v) e = codec_relu(e);
      }
      store_row(p.y, r, cols, v.data());
    }
  }
}

void upsample_nearest(const UpsampleNearestParams& p) {
  const auto dims = check_upsample_nearest(p, Device::CPU);
  const int64_t T = dims[0], H = dims[1], W = dims[2], C = dims[3];
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
  const auto dims = check_channels_to_time(p, Device::CPU);
  const int64_t T = dims[0], H = dims[1], W = dims[2], C = dims[3];
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
  const auto dims = check_unpatchify(p, Device::CPU);
  const int64_t T = dims[0], H = dims[1], W = dims[2], C = dims[3];
  const int64_t P = p.patch, pp = P * P;
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
  const auto dims = check_latent_denorm(p, Device::CPU);
  const int64_t C = dims[0], T = dims[1], H = dims[2], W = dims[3];
  const float* is = p.inv_std.data_as<float>();
  const float* mu = p.mean.data_as<float>();
  const int64_t pos = T * H * W;
  const Tensor y2 = p.y.reshape({pos, C});
#pragma omp parallel
  {
    std::vector<float> v(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < pos; ++i) {
      for (int64_t c = 0; c < C; ++c) v[c] = latent_denorm_element(p.x.get_f32(c * pos + i), is[c], mu[c]);
      store_row(y2, i, C, v.data());
    }
  }
}

void frames_to_u8(const FramesToU8Params& p) {
  const auto dims = check_frames_to_u8(p, Device::CPU);
  const int64_t rows = dims[0], cols = dims[1];
#pragma omp parallel
  {
    std::vector<float> v(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row_f32(p.x, r, cols, v.data());
      uint8_t* y = reinterpret_cast<uint8_t*>(row_ptr(p.y, r));
      for (int64_t c = 0; c < cols; ++c) y[c] = frame_to_u8(v[c]);
    }
  }
}

}  // namespace magi2::cpu
