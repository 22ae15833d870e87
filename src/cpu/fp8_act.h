// FP8 activation helpers of the CPU W8A8 references (docs/fp8.md): the
// e4m3 decode table and the 1 x 128 group quantiser, shared by the routed
// experts (moe_w8a8.cpp) and the linears (linear_fp8.cpp). The rounding is
// ops/numerics.h's (fp8_amax_step, fp8_act_scale, fp8_act_quant), which the
// CUDA kernels share. Internal to src/cpu/.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/numerics.h"

namespace magi2::cpu {

/// Every e4m3 bit pattern's exact fp32 value (e4m3_values().v[q]).
struct E4m3Values {
  float v[256];
  E4m3Values() {
    for (int i = 0; i < 256; ++i) v[i] = e4m3_bits_to_f32(static_cast<uint8_t>(i));
  }
};
inline const E4m3Values& e4m3_values() {
  static const E4m3Values t;
  return t;
}

/// x[0 .. n) -> the e4m3 bits q and one scale per group of kFp8ActGroup
/// values (scale[b]; the last group shorter when n is not a multiple).
inline void quantize_groups_bits(const float* x, int64_t n, uint8_t* q, float* scale) {
  for (int64_t g0 = 0, b = 0; g0 < n; g0 += kFp8ActGroup, ++b) {
    const int64_t g1 = std::min<int64_t>(n, g0 + kFp8ActGroup);
    float amax = 0.0f;
    for (int64_t i = g0; i < g1; ++i) amax = fp8_amax_step(amax, x[i]);
    const float s = fp8_act_scale(amax);
    scale[b] = s;
    for (int64_t i = g0; i < g1; ++i) q[i] = fp8_act_quant(x[i], s);
  }
}

/// quantize_groups_bits with the decoded e4m3 values qv (exact fp32) instead of the bits.
inline void quantize_groups(const float* x, int64_t n, float* qv, float* scale) {
  const float* tab = e4m3_values().v;
  uint8_t q[kFp8ActGroup];
  for (int64_t g0 = 0, b = 0; g0 < n; g0 += kFp8ActGroup, ++b) {
    const int64_t len = std::min<int64_t>(n - g0, kFp8ActGroup);
    quantize_groups_bits(x + g0, len, q, scale + b);
    for (int64_t i = 0; i < len; ++i) qv[g0 + i] = tab[q[i]];
  }
}

}  // namespace magi2::cpu
