// Device half of test_cuda_fp8_w8a8's E4m3Conversion and QuantRcp: the
// hardware e4m3 rounding (ops/numerics.h e4m3_bits_pair) against the software
// one on all 2^32 fp32 patterns, and the multiplying quantisers
// (fp8_act_quant_rcp; the producers' dev::fp8_quant2, cuda/fp8_quant.cuh)
// against the dividing one (fp8_act_quant) on inputs at and around every e4m3
// rounding boundary and on a random sweep.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/fp8_quant.cuh"
#include "mismatch_count.cuh"
#include "ops/numerics.h"

namespace magi2::test {

namespace {

__global__ void e4m3_cvt_mismatch_kernel(unsigned long long* __restrict__ count) {
  unsigned long long local = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 31);
       i += stride) {
    const float x = __uint_as_float(static_cast<uint32_t>(i));  // the non-negative half; the sign is a bit
    if (x != x) continue;                                         // NaN: the software keeps the sign, cvt may not
    const uint32_t hw = e4m3_bits_pair(x, x);
    const uint32_t sw = f32_to_e4m3_bits(x);
    local += ((hw & 0xffu) == sw && (hw >> 8) == sw) ? 0 : 1;
  }
  if (local != 0) atomicAdd(count, local);  // a count: its order does not matter
}

// A 32-bit mix of (a, b): the sweep's inputs, the same on any launch shape.
__device__ __forceinline__ uint32_t mix(uint32_t a, uint32_t b) {
  uint32_t h = a * 0x9e3779b1u ^ (b + 0x7f4a7c15u) * 0x85ebca77u;
  h ^= h >> 15;
  h *= 0x2c1b3c6du;
  h ^= h >> 12;
  h *= 0x297a2d39u;
  return h ^ (h >> 15);
}

// Both multiplying forms against the division: fp8_act_quant_rcp, and the
// producers' pair conversion (dev::fp8_quant2) with v in either slot.
__device__ __forceinline__ unsigned long long quant_differs(float v, float scale) {
  const float rcp = fp8_act_rcp(scale);
  const uint32_t want = fp8_act_quant(v, scale);
  const uint32_t pair = cuda::dev::fp8_quant2(v, 0.75f * v, scale, rcp);
  const uint32_t swapped = cuda::dev::fp8_quant2(0.75f * v, v, scale, rcp);
  const bool same = fp8_act_quant_rcp(v, scale, rcp) == want && (pair & 0xffu) == want &&
                    (pair >> 8) == fp8_act_quant(0.75f * v, scale) && (swapped >> 8) == want;
  return same ? 0 : 1;
}

// Thread i: scale i (random mantissa, exponent -40..40 around 1/448), then
// for each of the 254 finite positive e4m3 values and the midpoints between
// them, the quotient target times the scale and 17 fp32 neighbours each side,
// both signs; then `sweep` random (value, amax) pairs as a group's.
__global__ void quant_rcp_mismatch_kernel(int scales, int sweep, unsigned long long* __restrict__ count) {
  const int i = static_cast<int>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= scales) return;
  const uint32_t h = mix(static_cast<uint32_t>(i), 1u);
  const float scale = __uint_as_float(((127u - 9u - 40u + h % 81u) << 23) | (mix(i, 2u) & 0x7fffffu));
  unsigned long long local = 0;
  for (uint32_t e = 1; e < 0x7f; ++e) {
    const float lo = e4m3_bits_to_f32(static_cast<uint8_t>(e - 1)), hi = e4m3_bits_to_f32(static_cast<uint8_t>(e));
    const float targets[2] = {hi, 0.5f * (lo + hi)};
    for (float target : targets) {
      const uint32_t c = __float_as_uint(target * scale);
      for (int d = -17; d <= 17; ++d) {
        const float v = __uint_as_float(c + d);
        local += quant_differs(v, scale) + quant_differs(-v, scale);
      }
    }
  }
  for (int j = 0; j < sweep; ++j) {
    const float amax = __uint_as_float(((127u - 30u + mix(i, 3u + 2u * j) % 60u) << 23) | (mix(i, 4u + 2u * j) >> 9));
    const float sc = fp8_act_scale(amax);
    const float frac = static_cast<float>(mix(i, 5u + 3u * j) >> 8) * (1.0f / 16777216.0f);
    local += quant_differs(amax * frac, sc) + quant_differs(amax, sc) + quant_differs(-amax * frac, sc);
  }
  if (local != 0) atomicAdd(count, local);
}

}  // namespace

/// Number of non-negative, non-NaN fp32 inputs (2^31 patterns less the NaNs)
/// on which the hardware e4m3 rounding differs from f32_to_e4m3_bits.
/// Synchronises `s`; all ones on an allocation failure.
uint64_t e4m3_cvt_mismatches(cudaStream_t s) {
  unsigned long long* d = mismatch_counter(s);
  if (d != nullptr) e4m3_cvt_mismatch_kernel<<<1024, 256, 0, s>>>(d);
  return read_mismatches(d, s);
}

/// Number of (value, scale) inputs on which fp8_act_quant_rcp or
/// dev::fp8_quant2 differs from fp8_act_quant: `scales` random scales, each with the inputs at and near
/// every e4m3 rounding boundary (~35,000) and `sweep` random group values.
/// Synchronises `s`; all ones on an allocation failure.
uint64_t fp8_quant_rcp_mismatches(int scales, int sweep, cudaStream_t s) {
  unsigned long long* d = mismatch_counter(s);
  if (d != nullptr) quant_rcp_mismatch_kernel<<<(scales + 127) / 128, 128, 0, s>>>(scales, sweep, d);
  return read_mismatches(d, s);
}

}  // namespace magi2::test
