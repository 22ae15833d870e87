// conv3d on the CUDA backend (codec_ops.h): the TurboVAE decoder's and the
// Wan2.2 encoder's convolutions over channels-last [T, H, W, C] activations,
// as an implicit GEMM on the CUDA cores. C[m, n] = sum_k A[m, k] W[n, k] with
// m an output position (t, h, w), n an output channel and k = ((kt*kH + kh)*kW
// + kw)*C_in + c the weight's own order; A is gathered from x on the fly
// (zeros outside the input, the time index clamped with TimePad::Replicate).
// Each output is one fp32 accumulator summed over k in ascending order with
// separate multiply and add (--fmad=false), bf16 operands widened exactly: the
// CPU backend's micro-kernel order, hence its bytes. Then round(acc) + bias,
// rounded again (the bias after the rounded conv result, ops.h).
#include <cstdint>

#include "cuda/codec_ops.h"
#include "cuda/conv_runner.h"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "ops/codec_checks.h"

namespace magi2::cuda {

namespace {

using dev::load_f32;
using dev::store_f32;

constexpr int kBM = 64;       // output positions per block
constexpr int kBN = 64;       // output channels per block
constexpr int kBK = 16;       // k per shared-memory stage
constexpr int kThreads = 256;  // 16 x 16 threads, 4 x 4 outputs each

// The geometry of one conv3d call (all sizes from check_conv3d).
struct Conv3dGeom {
  int64_t T, H, W, ci;     // input
  int64_t kt, kh, kw;      // kernel
  int64_t To, Ho, Wo, co;  // output
  int64_t K;               // kt * kh * kw * ci
  int st, sh, sw;          // stride
  int dt, dh, dw;          // dilation
  int pt, ph, pw;          // front padding
  bool replicate;          // TimePad::Replicate in time
};

template <typename T>
__global__ void __launch_bounds__(kThreads) conv3d_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                          const T* __restrict__ bias, T* __restrict__ y,
                                                          Conv3dGeom g, bool bf) {
  __shared__ float as[kBK][kBM + 4];
  __shared__ float bs[kBK][kBN + 4];
  const int tid = threadIdx.x;
  const int tm = tid / 16, tn = tid % 16;  // compute: positions tm + 16 i, channels tn + 16 j
  const int lk = tid % kBK, lr = tid / kBK;  // load: k lane, rows lr + 16 r
  const int64_t M = g.To * g.Ho * g.Wo;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM, n0 = static_cast<int64_t>(blockIdx.y) * kBN;

  // The input origin (before the kernel offsets) of the 4 positions this thread loads.
  int64_t tb[4], hb[4], wb[4];
  bool mv[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t m = m0 + lr + 16 * r;
    mv[r] = m < M;
    const int64_t mm = mv[r] ? m : 0;
    const int64_t wo = mm % g.Wo, ho = (mm / g.Wo) % g.Ho, to = mm / (g.Wo * g.Ho);
    tb[r] = to * g.st - g.pt;
    hb[r] = ho * g.sh - g.ph;
    wb[r] = wo * g.sw - g.pw;
  }

  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

  for (int64_t k0 = 0; k0 < g.K; k0 += kBK) {
    const int64_t k = k0 + lk;
    // Decode k = ((kt*kH + kh)*kW + kw)*C_in + c once per stage.
    const bool kv = k < g.K;
    const int64_t c = k % g.ci, r1 = k / g.ci;
    const int64_t kw = r1 % g.kw, kh = (r1 / g.kw) % g.kh, kt = r1 / (g.kw * g.kh);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float v = 0.f;
      int64_t ti = tb[r] + kt * g.dt;
      const int64_t hi = hb[r] + kh * g.dh, wi = wb[r] + kw * g.dw;
      if (g.replicate) ti = ti < 0 ? 0 : (ti >= g.T ? g.T - 1 : ti);
      if (kv && mv[r] && ti >= 0 && ti < g.T && hi >= 0 && hi < g.H && wi >= 0 && wi < g.W)
        v = load_f32(x + ((ti * g.H + hi) * g.W + wi) * g.ci + c);
      as[lk][lr + 16 * r] = v;
      const int64_t n = n0 + lr + 16 * r;
      bs[lk][lr + 16 * r] = (kv && n < g.co) ? load_f32(w + n * g.K + k) : 0.f;
    }
    __syncthreads();
    const int64_t kn = g.K - k0 < kBK ? g.K - k0 : kBK;
    for (int kk = 0; kk < kn; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = as[kk][tm + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = bs[kk][tn + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + tm + 16 * i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + tn + 16 * j;
      if (n >= g.co) continue;
      const float bv = bias ? load_f32(bias + n) : 0.f;  // the CPU adds a zero bias too
      const float conv = bf ? dev::round_bf16(acc[i][j]) : acc[i][j];
      store_f32(y + m * g.co + n, conv + bv);
    }
  }
}

template <typename E>
__global__ void pad_time_kernel(const E* __restrict__ x, E* __restrict__ xp, int64_t T, int64_t frame, int front,
                                int64_t frames_out) {
  const int64_t n = frames_out * frame;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t t = e / frame - front;
    t = t < 0 ? 0 : (t >= T ? T - 1 : t);
    xp[e] = x[t * frame + e % frame];
  }
}

__global__ void add_bias_bf16_kernel(uint16_t* y, const uint16_t* __restrict__ bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[e] = dev::f32_to_bf16(dev::bf16_to_f32(y[e]) + dev::bf16_to_f32(bias[e % cols]));
}

unsigned grid_for(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

}  // namespace

void pad_time_replicate(const void* x, void* xp, int64_t T, int64_t frame_elems, int front, int back, size_t elem,
                        cudaStream_t s) {
  const int64_t frames_out = T + front + back;
  if (frames_out * frame_elems == 0) return;
  MAGI2_CHECK(elem == 2 || elem == 4, "pad_time_replicate: elements of 2 or 4 bytes");
  if (elem == 2)
    pad_time_kernel<<<grid_for(frames_out * frame_elems), 256, 0, s>>>(
        static_cast<const uint16_t*>(x), static_cast<uint16_t*>(xp), T, frame_elems, front, frames_out);
  else
    pad_time_kernel<<<grid_for(frames_out * frame_elems), 256, 0, s>>>(
        static_cast<const uint32_t*>(x), static_cast<uint32_t*>(xp), T, frame_elems, front, frames_out);
  MAGI2_CUDA_CHECK_LAUNCH("pad_time_replicate");
}

void add_bias_bf16(uint16_t* y, const uint16_t* bias, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows * cols == 0) return;
  add_bias_bf16_kernel<<<grid_for(rows * cols), 256, 0, s>>>(y, bias, rows, cols);
  MAGI2_CUDA_CHECK_LAUNCH("add_bias_bf16");
}

void conv3d(const Conv3dParams& p, cudaStream_t s) {
  const Conv3dDims d = check_conv3d(p, Device::CUDA);
  const Conv3dGeom g{.T = d.in[0], .H = d.in[1], .W = d.in[2], .ci = d.cin,
                     .kt = d.kernel[0], .kh = d.kernel[1], .kw = d.kernel[2],
                     .To = d.out[0], .Ho = d.out[1], .Wo = d.out[2], .co = d.cout,
                     .K = d.kernel[0] * d.kernel[1] * d.kernel[2] * d.cin,
                     .st = p.stride[0], .sh = p.stride[1], .sw = p.stride[2],
                     .dt = p.dilation[0], .dh = p.dilation[1], .dw = p.dilation[2],
                     .pt = p.pad_front[0], .ph = p.pad_front[1], .pw = p.pad_front[2],
                     .replicate = p.time_pad == TimePad::Replicate};
  const int64_t M = g.To * g.Ho * g.Wo;
  if (M == 0 || g.co == 0) return;
  const int64_t mb = (M + kBM - 1) / kBM, nb = (g.co + kBN - 1) / kBN;
  MAGI2_CHECK(mb < (int64_t{1} << 31) && nb < 65536, "conv3d: output ", shape_str(p.y.shape()),
              " is too large for one launch");
  const dim3 grid(static_cast<unsigned>(mb), static_cast<unsigned>(nb));
  if (p.x.dtype() == DType::BF16)
    conv3d_kernel<uint16_t><<<grid, kThreads, 0, s>>>(
        static_cast<const uint16_t*>(p.x.data()), static_cast<const uint16_t*>(p.w.data()),
        p.bias.defined() ? static_cast<const uint16_t*>(p.bias.data()) : nullptr, static_cast<uint16_t*>(p.y.data()),
        g, true);
  else
    conv3d_kernel<float><<<grid, kThreads, 0, s>>>(
        static_cast<const float*>(p.x.data()), static_cast<const float*>(p.w.data()),
        p.bias.defined() ? static_cast<const float*>(p.bias.data()) : nullptr, static_cast<float*>(p.y.data()), g,
        false);
  MAGI2_CUDA_CHECK_LAUNCH("conv3d");
}

}  // namespace magi2::cuda
