// The TurboVAE decoder's element-wise and layout ops on the CUDA backend
// (codec_ops.h): activation, upsample_nearest, channels_to_time, unpatchify,
// latent_denorm and frames_to_u8. One thread per output element (grid-stride
// loops); the formulas are ops/codec_numerics.h, shared with the CPU, and the
// layout ops move elements as they are, so every op gives the CPU's bytes.
#include <cstdint>

#include "cuda/codec_ops.h"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "ops/codec_checks.h"
#include "ops/codec_numerics.h"

namespace magi2::cuda {

namespace {

using dev::load_f32;
using dev::store_f32;

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

#define MAGI2_GRID_STRIDE(e, n)                                                                         \
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < (n); \
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename T>
__global__ void activation_kernel(const T* x, int64_t ldx, T* y, int64_t ldy, int64_t rows, int64_t cols,
                                  bool silu) {
  MAGI2_GRID_STRIDE(e, rows * cols) {
    const int64_t r = e / cols, c = e % cols;
    const float v = load_f32(x + r * ldx + c);
    store_f32(y + r * ldy + c, silu ? text_silu(v) : codec_relu(v));
  }
}

// Elements moved as raw words of their size (1, 2 or 4 bytes).
template <typename E>
__global__ void upsample_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t T, int64_t H, int64_t W,
                                int64_t C, int fh, int fw) {
  const int64_t Ho = H * fh, Wo = W * fw;
  MAGI2_GRID_STRIDE(e, T * Ho * Wo * C) {
    const int64_t c = e % C, wo = (e / C) % Wo, ho = (e / (C * Wo)) % Ho, t = e / (C * Wo * Ho);
    y[e] = x[((t * H + ho / fh) * W + wo / fw) * C + c];
  }
}

template <typename E>
__global__ void channels_to_time_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t frames_out, int64_t hw,
                                        int64_t C, int n, int drop_front) {
  MAGI2_GRID_STRIDE(e, frames_out * hw * C) {
    const int64_t c = e % C, i = (e / C) % hw, f = e / (C * hw);
    const int64_t g = f + drop_front, t = g / n, s = g % n;
    y[e] = x[((t * hw + i) * n + s) * C + c];
  }
}

// Output pixel (row h*P + b, column w*P + a) of channel c takes input channel c*P*P + a*P + b at (h, w).
template <typename E>
__global__ void unpatchify_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t T, int64_t H, int64_t W,
                                  int64_t C, int P) {
  const int64_t Ho = H * P, Wo = W * P, pp = int64_t{P} * P;
  MAGI2_GRID_STRIDE(e, T * Ho * Wo * C) {
    const int64_t c = e % C, xo = (e / C) % Wo, yo = (e / (C * Wo)) % Ho, t = e / (C * Wo * Ho);
    const int64_t h = yo / P, b = yo % P, w = xo / P, a = xo % P;
    y[e] = x[((t * H + h) * W + w) * C * pp + c * pp + a * P + b];
  }
}

template <typename TX, typename TY>
__global__ void latent_denorm_kernel(const TX* __restrict__ x, const float* __restrict__ inv_std,
                                     const float* __restrict__ mean, TY* __restrict__ y, int64_t C, int64_t pos) {
  MAGI2_GRID_STRIDE(e, pos * C) {
    const int64_t c = e % C, i = e / C;
    store_f32(y + e, latent_denorm_element(load_f32(x + c * pos + i), inv_std[c], mean[c]));
  }
}

template <typename T>
__global__ void frames_to_u8_kernel(const T* __restrict__ x, int64_t ldx, uint8_t* __restrict__ y, int64_t ldy,
                                    int64_t rows, int64_t cols) {
  MAGI2_GRID_STRIDE(e, rows * cols) {
    const int64_t r = e / cols, c = e % cols;
    y[r * ldy + c] = frame_to_u8(load_f32(x + r * ldx + c));
  }
}

// Calls f(E{}) with the unsigned word type of the element size (1, 2 or 4 bytes).
template <typename F>
void by_element_size(DType dt, const char* op, F&& f) {
  switch (dtype_size(dt)) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    default: throw Error(str_cat(op, ": unsupported dtype ", dtype_name(dt)));
  }
}

}  // namespace

void activation(const ActivationParams& p, cudaStream_t s) {
  const auto dims = check_activation(p, Device::CUDA);
  const int64_t rows = dims[0], cols = dims[1];
  if (rows * cols == 0) return;
  const bool silu = p.kind == Activation::SiLU;
  if (p.x.dtype() == DType::BF16)
    activation_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(
        static_cast<const uint16_t*>(p.x.data()), p.x.row_stride(), static_cast<uint16_t*>(p.y.data()),
        p.y.row_stride(), rows, cols, silu);
  else
    activation_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(static_cast<const float*>(p.x.data()),
                                                                   p.x.row_stride(), static_cast<float*>(p.y.data()),
                                                                   p.y.row_stride(), rows, cols, silu);
  MAGI2_CUDA_CHECK_LAUNCH("activation");
}

void upsample_nearest(const UpsampleNearestParams& p, cudaStream_t s) {
  const auto d = check_upsample_nearest(p, Device::CUDA);
  const int64_t n = p.y.numel();
  if (n == 0) return;
  by_element_size(p.x.dtype(), "upsample_nearest", [&](auto e) {
    using E = decltype(e);
    upsample_kernel<E><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const E*>(p.x.data()),
                                                          static_cast<E*>(p.y.data()), d[0], d[1], d[2], d[3],
                                                          p.factor_h, p.factor_w);
  });
  MAGI2_CUDA_CHECK_LAUNCH("upsample_nearest");
}

void channels_to_time(const ChannelsToTimeParams& p, cudaStream_t s) {
  const auto d = check_channels_to_time(p, Device::CUDA);
  const int64_t frames_out = d[0] * p.n - p.drop_front, n = p.y.numel();
  if (n == 0) return;
  by_element_size(p.x.dtype(), "channels_to_time", [&](auto e) {
    using E = decltype(e);
    channels_to_time_kernel<E><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const E*>(p.x.data()),
                                                                  static_cast<E*>(p.y.data()), frames_out,
                                                                  d[1] * d[2], d[3], p.n, p.drop_front);
  });
  MAGI2_CUDA_CHECK_LAUNCH("channels_to_time");
}

void unpatchify(const UnpatchifyParams& p, cudaStream_t s) {
  const auto d = check_unpatchify(p, Device::CUDA);
  const int64_t n = p.y.numel();
  if (n == 0) return;
  by_element_size(p.x.dtype(), "unpatchify", [&](auto e) {
    using E = decltype(e);
    unpatchify_kernel<E><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const E*>(p.x.data()),
                                                            static_cast<E*>(p.y.data()), d[0], d[1], d[2], d[3],
                                                            p.patch);
  });
  MAGI2_CUDA_CHECK_LAUNCH("unpatchify");
}

void latent_denorm(const LatentDenormParams& p, cudaStream_t s) {
  const auto d = check_latent_denorm(p, Device::CUDA);
  const int64_t C = d[0], pos = d[1] * d[2] * d[3];
  if (C * pos == 0) return;
  const float* is = static_cast<const float*>(p.inv_std.data());
  const float* mu = static_cast<const float*>(p.mean.data());
  const bool xb = p.x.dtype() == DType::BF16, yb = p.y.dtype() == DType::BF16;
  const unsigned b = blocks_for(C * pos);
  const void* x = p.x.data();
  void* y = p.y.data();
  if (xb && yb)
    latent_denorm_kernel<<<b, kThreads, 0, s>>>(static_cast<const uint16_t*>(x), is, mu, static_cast<uint16_t*>(y), C,
                                                pos);
  else if (xb)
    latent_denorm_kernel<<<b, kThreads, 0, s>>>(static_cast<const uint16_t*>(x), is, mu, static_cast<float*>(y), C,
                                                pos);
  else if (yb)
    latent_denorm_kernel<<<b, kThreads, 0, s>>>(static_cast<const float*>(x), is, mu, static_cast<uint16_t*>(y), C,
                                                pos);
  else
    latent_denorm_kernel<<<b, kThreads, 0, s>>>(static_cast<const float*>(x), is, mu, static_cast<float*>(y), C, pos);
  MAGI2_CUDA_CHECK_LAUNCH("latent_denorm");
}

void frames_to_u8(const FramesToU8Params& p, cudaStream_t s) {
  const auto dims = check_frames_to_u8(p, Device::CUDA);
  const int64_t rows = dims[0], cols = dims[1];
  if (rows * cols == 0) return;
  uint8_t* y = static_cast<uint8_t*>(p.y.data());
  if (p.x.dtype() == DType::BF16)
    frames_to_u8_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(
        static_cast<const uint16_t*>(p.x.data()), p.x.row_stride(), y, p.y.row_stride(), rows, cols);
  else
    frames_to_u8_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(static_cast<const float*>(p.x.data()),
                                                                     p.x.row_stride(), y, p.y.row_stride(), rows,
                                                                     cols);
  MAGI2_CUDA_CHECK_LAUNCH("frames_to_u8");
}

}  // namespace magi2::cuda
