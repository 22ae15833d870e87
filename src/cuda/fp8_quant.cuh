// Warp-level FP8 activation quantisation per 1 x 128 group (docs/fp8.md):
// one warp covers one group, 4 elements a lane, with ops/numerics.h's rule
// (fp8_amax_step, fp8_act_scale, fp8_act_quant) that the CPU references
// (cpu/fp8_act.h) apply, so the e4m3 bytes and scales are bit-identical to the
// host's. Used by the FP8 linears (linear_fp8.cu; rms_norm's FP8 rows in
// elementwise.cu), the FP8 attention's quantiser and its producer
// (attn_glue.cu); the W8A8 routed experts quantise 16 lanes a group in their
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

/// One 1 x 128 group held by a half-warp, 8 values a lane (bf16-exact values
/// of a row, e.g. a q row of FP8 attention or a 128-column group of an FP8
/// linear's input) -> the lane's 8 e4m3 bytes at dst (8-byte aligned) and the
/// group's scale at *scale (stored by the half-warp's lane 0; `lane` counts
/// within the half-warp), with fp8_act_quant's bytes by its reciprocal form.
/// mask: the half-warp's lanes, all of which call it together.
__device__ __forceinline__ void fp8_quantize8_half(const float* f, uint8_t* dst, float* scale, int lane,
                                                   unsigned mask) {
  float m = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) m = fp8_amax_step(m, f[j]);
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) m = fp8_amax_step(m, __shfl_xor_sync(mask, m, o, 16));
  const float sc = fp8_act_scale(m), rcp = fp8_act_rcp(sc);
  if (lane == 0) *scale = sc;
  uint32_t w[2] = {0u, 0u};
#pragma unroll
  for (int j = 0; j < 8; ++j) w[j / 4] |= static_cast<uint32_t>(fp8_act_quant_rcp(f[j], sc, rcp)) << (8 * (j % 4));
  *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
}

}  // namespace magi2::cuda::dev
