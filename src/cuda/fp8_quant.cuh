// Warp-level FP8 activation quantisation per 1 x 128 group (docs/fp8.md):
// one warp covers one group, 4 elements a lane, with ops/numerics.h's rule
// (fp8_amax_step, fp8_act_scale, fp8_act_quant) that the CPU references
// (cpu/fp8_act.h) apply, so the e4m3 bytes and scales are bit-identical to the
// host's. Used by the FP8 linears (linear_fp8.cu) and the FP8 attention's
// quantiser; the W8A8 routed experts quantise 16 lanes a group in their
// scatter (moe_w8a8.cu). Device-only header.
#pragma once

#include <cstdint>

#include "ops/numerics.h"

namespace magi2::cuda::dev {

static_assert(kFp8ActGroup == 32 * 4, "one warp covers one activation group, 4 elements a lane");

/// The group's amax over the warp (each lane holds the amax of its 4 elements); NaN sticky.
__device__ __forceinline__ float fp8_warp_amax(float m) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fp8_amax_step(m, __shfl_xor_sync(0xffffffffu, m, o));
  return m;
}

/// A lane's four values of one group -> their four e4m3 bytes (little-endian
/// in one word) with the group's scale, which lane 0 stores at *scale. All 32
/// lanes must call it together.
__device__ __forceinline__ uint32_t fp8_quantize4(const float v[4], float* scale, int lane) {
  float m = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) m = fp8_amax_step(m, v[j]);
  const float s = fp8_act_scale(fp8_warp_amax(m));
  if (lane == 0) *scale = s;
  uint32_t w = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) w |= static_cast<uint32_t>(fp8_act_quant(v[j], s)) << (8 * j);
  return w;
}

}  // namespace magi2::cuda::dev
