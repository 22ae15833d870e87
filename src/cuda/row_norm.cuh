// RMSNorm of one bf16 row staged in shared memory, by one warp (spec
// magi2-dit.md §4.1): the body of rms_norm_row_kernel (elementwise.cu) and of
// the mHC pre-mix with its branch's pre-norm (mhc_pre.cu), so both give the
// bytes of the CPU reference (src/cpu/norm.cpp). Device code only; the
// including file is built with --fmad=false.
#pragma once

#include <cstdint>

#include "cuda/device_fp.cuh"
#include "cuda/fp8_quant.cuh"

namespace magi2::cuda::dev {

/// The 8 bf16 values of a 16-byte load as fp32, in memory order.
__device__ __forceinline__ void bf16x8_unpack(const uint4& v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

/// 8 fp32 values rounded to bf16 (round to nearest even) as one 16-byte store.
__device__ __forceinline__ uint4 bf16x8_pack(const float* f) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = static_cast<uint32_t>(f32_to_bf16(f[2 * i])) | (static_cast<uint32_t>(f32_to_bf16(f[2 * i + 1])) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/// 8 fp32 values to 16-byte aligned p: as fp32 (two 16-byte stores) or as bf16 (one).
__device__ __forceinline__ void store8_f32(float* p, const float* f) {
  reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}
__device__ __forceinline__ void store8_f32(uint16_t* p, const float* f) {
  *reinterpret_cast<uint4*>(p) = bf16x8_pack(f);
}

/// One warp normalises the row sx: d bf16 values (d % 8 == 0) as d / 8
/// 16-byte units in shared memory, filled and __syncwarp()ed by the caller.
/// The sum of squares in rms_norm_kernel's order (lane j of each half-warp sums
/// elements j, j + 16, ... in increasing order, both halves the same; the 16
/// sums meet in the tree 8, 4, 2, 1), rs = 1 / sqrt(mean + eps), and
/// y = (x rs)(wm + 1) (wm: the row's group's d gains, f32, 16-byte aligned)
/// into yv (bf16 or f32, 16-byte aligned). kQ8 (bf16 y, d a multiple of 128):
/// also the e4m3 row y8q (d bytes) and its d / 128 scales y8s of the bf16 y,
/// each 1 x 128 group by one half-warp (fp8_quantize8_half).
template <typename TO, bool kQ8 = false>
__device__ __forceinline__ void rms_norm_row_shared(const uint4* sx, int d, int lane, const float* __restrict__ wm,
                                                    float eps, TO* __restrict__ yv, uint8_t* __restrict__ y8q = nullptr,
                                                    float* __restrict__ y8s = nullptr) {
  const uint16_t* sh = reinterpret_cast<const uint16_t*>(sx);
  float acc = 0.f;
  for (int i = lane & 15; i < d; i += 16) {
    const float v = bf16_to_f32(sh[i]);
    acc += v * v;
  }
  for (int off = 8; off >= 1; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off, 16);
  acc = __shfl_sync(0xffffffffu, acc, 0, 16);
  const float ms = acc * (1.0f / static_cast<float>(d));
  const float rs = 1.0f / sqrtf(ms + eps);
  const int n8 = d / 8;
  for (int c = lane; c < n8; c += 32) {
    float f[8], g[8];
    bf16x8_unpack(sx[c], f);
    const float4 w0 = reinterpret_cast<const float4*>(wm)[2 * c], w1 = reinterpret_cast<const float4*>(wm)[2 * c + 1];
    g[0] = w0.x, g[1] = w0.y, g[2] = w0.z, g[3] = w0.w, g[4] = w1.x, g[5] = w1.y, g[6] = w1.z, g[7] = w1.w;
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = (f[i] * rs) * (g[i] + 1.0f);
    store8_f32(yv + 8 * c, f);
    if constexpr (kQ8) {
#pragma unroll
      for (int i = 0; i < 8; ++i) f[i] = round_bf16(f[i]);
      fp8_quantize8_half(f, y8q + 8 * c, y8s + c / 16, lane & 15, (lane & 16) ? 0xffff0000u : 0x0000ffffu);
    }
  }
}

}  // namespace magi2::cuda::dev
