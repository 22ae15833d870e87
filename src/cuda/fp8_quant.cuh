// Warp-level FP8 activation quantisation per 1 x 128 group (docs/fp8.md):
// one warp covers one group, 4 elements a lane, or a half-warp 8 a lane, with
// ops/numerics.h's rule (fp8_amax_step, fp8_act_scale, fp8_act_quant) that the
// CPU references (cpu/fp8_act.h) apply, so the e4m3 bytes and scales are
// bit-identical to the host's for every input without NaN. The amax is an
// integer max of the magnitudes' bits and the bytes come from q = v * (1 /
// scale) by one hardware conversion per pair wherever that is provably the
// division's rounding (fp8_rcp_exact): fewer operations a value than a
// division each. Used by the FP8 linears' quantiser (linear_fp8.cu), the
// producers that write FP8 rows (rms_norm and SwiGLU7 in elementwise.cu,
// attn_out and FP8 attention's q producer in attn_glue.cu, the MoE combine in
// moe_grouped.cu) and the FP8 attention's quantiser (attention_fp8.cu, its
// warp amax); the W8A8 routed experts quantise 16 lanes a group in their
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

/// |v|'s fp32 bits. Their unsigned order is the magnitudes' order with a NaN
/// above every number, so the largest over a group is its amax, fp8_amax_step's
/// value (for a group holding NaNs, some NaN: the scale is NaN either way).
__device__ __forceinline__ uint32_t fp8_abs_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

/// Whether the hardware rounding of q = v * rcp (a: |q|'s bits) is
/// fp8_act_quant's byte without a window: q is zero, or lies in e4m3's normal
/// range [2^-6, 2^9) more than 16 fp32 ulps from a rounding midpoint (there
/// the low 20 mantissa bits are 0x80000, ties to even). The reference quotient
/// fl(v / scale) is within ~7 ulps of q (fp8_act_quant_rcp's argument), so it
/// rounds to the same e4m3 value; across a binade edge both sides round alike.
__device__ __forceinline__ bool fp8_rcp_exact(uint32_t a) {
  return ((a >> 23) - 121u <= 14u && ((a - (0x80000u - 16u)) & 0xfffffu) > 32u) || a == 0u;
}

/// fp8_act_quant(v0, scale) in bits 0-7 and fp8_act_quant(v1, scale) in bits
/// 8-15, rcp = fp8_act_rcp(scale): one conversion for both where
/// fp8_rcp_exact holds for both (almost always), else fp8_act_quant_rcp each.
__device__ __forceinline__ uint32_t fp8_quant2(float v0, float v1, float scale, float rcp) {
  const float q0 = v0 * rcp, q1 = v1 * rcp;
  if (fp8_rcp_exact(fp8_abs_bits(q0)) && fp8_rcp_exact(fp8_abs_bits(q1))) return e4m3_bits_pair(q0, q1);
  return static_cast<uint32_t>(fp8_act_quant_rcp(v0, scale, rcp)) |
         static_cast<uint32_t>(fp8_act_quant_rcp(v1, scale, rcp)) << 8;
}

/// fp8_act_quant of v[0..3] with scale (rcp = fp8_act_rcp(scale)) as four
/// bytes of one word, v[0] in bits 0-7: two fp8_quant2.
__device__ __forceinline__ uint32_t fp8_quant4(const float* v, float scale, float rcp) {
  return fp8_quant2(v[0], v[1], scale, rcp) | fp8_quant2(v[2], v[3], scale, rcp) << 16;
}

/// A lane's four values of one group -> their four e4m3 bytes (little-endian
/// in one word) with the group's scale, which lane 0 stores at *scale. All 32
/// lanes must call it together.
__device__ __forceinline__ uint32_t fp8_quantize4(const float v[4], float* scale, int lane) {
  uint32_t m = 0u;
#pragma unroll
  for (int j = 0; j < 4; ++j) m = max(m, fp8_abs_bits(v[j]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  const float s = fp8_act_scale(__uint_as_float(m)), rcp = fp8_act_rcp(s);
  if (lane == 0) *scale = s;
  return fp8_quant4(v, s, rcp);
}

/// One 1 x 128 group held by a half-warp, 8 values a lane (bf16-exact values
/// of a row, e.g. a q row of FP8 attention or a 128-column group of an FP8
/// linear's input) -> the lane's 8 e4m3 bytes at dst (8-byte aligned) and the
/// group's scale at *scale (stored by the half-warp's lane 0; `lane` counts
/// within the half-warp), fp8_act_quant's bytes. mask: the half-warp's lanes,
/// all of which call it together.
__device__ __forceinline__ void fp8_quantize8_half(const float* f, uint8_t* dst, float* scale, int lane,
                                                   unsigned mask) {
  uint32_t m = 0u;
#pragma unroll
  for (int j = 0; j < 8; ++j) m = max(m, fp8_abs_bits(f[j]));
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(mask, m, o, 16));
  const float sc = fp8_act_scale(__uint_as_float(m)), rcp = fp8_act_rcp(sc);
  if (lane == 0) *scale = sc;
  *reinterpret_cast<uint2*>(dst) = make_uint2(fp8_quant4(f, sc, rcp), fp8_quant4(f + 4, sc, rcp));
}

}  // namespace magi2::cuda::dev
