// Device-side fp32/bf16 helpers shared by the mHC and MoE kernels: the same
// conversions and transcendental evaluation as the phase-0 kernels of
// elementwise.cu (RNE bf16 with NaN kept, exp in double rounded to fp32), and
// the CPU reference's 16-lane dot product order (src/cpu/cpu_common.h
// dot_f32). Include only from .cu files.
#pragma once

#include <cstdint>

namespace magi2::cuda::dev {

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

// Same bits as core/dtype.h f32_to_bf16_bits: RNE, NaN kept quiet with its sign.
__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// Correctly rounded exp (what glibc's expf gives for all but a sliver of inputs).
__device__ __forceinline__ float exp_f32(float x) { return static_cast<float>(exp(static_cast<double>(x))); }
__device__ __forceinline__ float sigmoid_f32(float z) { return 1.0f / (1.0f + exp_f32(-z)); }

/// dot_f32 of the CPU backend by one thread: 16 partial sums over i = j
/// (mod 16) in increasing i, then the halving tree 8, 4, 2, 1.
__device__ __forceinline__ float dot16(const float* a, const float* b, int64_t n) {
  float acc[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) acc[j] = 0.f;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  }
#pragma unroll
  for (int j = 0; j < 16; ++j)
    if (i + j < n) acc[j] += a[i + j] * b[i + j];
#pragma unroll
  for (int w = 8; w >= 1; w /= 2) {
#pragma unroll
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return acc[0];
}

/// The tree of dot16 over the 16 lanes of a half-warp (lane j holding partial
/// sum j): the result is valid in lane 0 of the half-warp.
__device__ __forceinline__ float half_warp_tree(float acc) {
  const unsigned mask = (threadIdx.x & 16) ? 0xffff0000u : 0x0000ffffu;
  for (int off = 8; off >= 1; off /= 2) acc += __shfl_down_sync(mask, acc, off, 16);
  return acc;
}

/// Weight group of row r (Groups::cu packed as int4, as group_of on the CPU).
__device__ __forceinline__ int group_of(int4 cu, int groups, int64_t r) {
  int m = 0;
  while (m + 1 < groups && r >= (m == 0 ? cu.y : cu.z)) ++m;
  return m;
}

}  // namespace magi2::cuda::dev
