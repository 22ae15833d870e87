// Element formulas of the Qwen3.5 text encoder ops (ops/text_params.h,
// through ops.h), one definition each for the CPU reference (src/cpu/gated.cpp,
// linear_attention.cpp, rotary.cpp) and the CUDA kernels (src/cuda/text_ops.cu,
// delta_rule.cu): the torch bf16 element-wise rounding points of the official
// CPU bf16 path (every bf16 tensor op computes in fp32 and rounds its result
// once), or no rounding in the fp32 reference mode (`bf` false).
//
// Companion of ops/numerics.h (same rules: light header, host and device,
// no FMA contraction on either side); kept apart so the DiT's files do not
// depend on it. The exponential is glibc expf's on both sides (device_fp.cuh
// exp_f32 reproduces its bits), so silu/sigmoid agree bit for bit; log1p (the
// softplus of the decay) is libm's on the host and CUDA's log1pf on the device,
// which may differ by an ulp.
#pragma once

#include <cstdint>

#include "ops/numerics.h"

#if defined(__CUDACC__)
#include "cuda/device_fp.cuh"
#endif

namespace magi2 {

/// exp(x) in fp32 with glibc expf's bits (host: libm; device: dev::exp_f32).
MAGI2_HD float text_exp_f32(float x) {
#if defined(__CUDA_ARCH__)
  return cuda::dev::exp_f32(x);
#else
  return __builtin_expf(x);
#endif
}

/// log1p(x) in fp32 (host: libm log1pf; device: CUDA log1pf, within an ulp of it).
MAGI2_HD float text_log1p_f32(float x) {
#if defined(__CUDA_ARCH__)
  return log1pf(x);
#else
  return __builtin_log1pf(x);
#endif
}

/// bf16(x) widened back (RNE, NaN kept quiet with its sign): core/dtype.h round_bf16.
MAGI2_HD float text_round_bf16(float f) {
  uint32_t u = numerics_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return numerics_bits_f32(((u >> 16) | 0x0040u) << 16);
  u += 0x7fffu + ((u >> 16) & 1u);
  return numerics_bits_f32((u >> 16) << 16);
}

/// bf16(x) when `bf`, else x: the rounding of one torch op's result on the bf16 path.
MAGI2_HD float text_round(float x, bool bf) { return bf ? text_round_bf16(x) : x; }

/// sigmoid(z) = 1 / (1 + exp(-z)) in fp32 (torch's CPU sigmoid on a widened value).
MAGI2_HD float text_sigmoid(float z) { return 1.0f / (1.0f + text_exp_f32(-z)); }

/// silu(x) = x / (1 + exp(-x)) in fp32 (torch's CPU SiLU).
MAGI2_HD float text_silu(float x) { return x / (1.0f + text_exp_f32(-x)); }

/// softplus(x) with torch's threshold 20: x above it, else log1p(exp(x)).
MAGI2_HD float text_softplus(float x) { return x > 20.0f ? x : text_log1p_f32(text_exp_f32(x)); }

/// One output of the causal conv1d from its fp32 tap sum (CausalConv1dParams):
/// with SiLU the conv result is a bf16 tensor first, then SiLU in fp32; the
/// store rounds once more (the caller's).
MAGI2_HD float conv1d_output(float acc, bool silu, bool bf) {
  if (!silu) return acc;
  const float c = text_round(acc, bf);
  return text_silu(c);
}

/// One element of the gated RMSNorm (GatedRmsNormParams) from the d-vector's
/// rs = 1 / sqrt(mean(x^2) + eps): n = x rs; bf16: bf16(w * bf16(n)) (a bf16
/// product), fp32: w n; times silu(z) in fp32 (bf16 * fp32 promotes); the store
/// rounds once.
MAGI2_HD float gated_rms_element(float x, float rs, float w, float z, bool bf) {
  float n = x * rs;
  n = bf ? text_round_bf16(w * text_round_bf16(n)) : w * n;
  return n * text_silu(z);
}

/// The gated product x * act(g) of sigmoid_mul / silu_mul: act rounded to bf16
/// first on the bf16 path (act(g).to(bf16) * x); the store rounds the product.
MAGI2_HD float gated_product(float act, float x, bool bf) { return text_round(act, bf) * x; }

/// Half-split rotary of one pair (RotaryParams): c, s are the (rounded) cos and
/// sin of the angle; each product and the sum are torch bf16 ops on the bf16 path.
MAGI2_HD void rotary_pair(float x1, float x2, float c, float s, bool bf, float& y1, float& y2) {
  const float a = text_round(x1 * c, bf), b = text_round(-x2 * s, bf);
  const float d = text_round(x2 * c, bf), e = text_round(x1 * s, bf);
  y1 = text_round(a + b, bf);
  y2 = text_round(d + e, bf);
}

/// The delta rule's write strength beta = sigmoid(b), a bf16 tensor on the bf16 path.
MAGI2_HD float delta_beta(float b, bool bf) { return text_round(text_sigmoid(b), bf); }

/// The delta rule's per-token log decay g = -exp(A_log) * softplus(a + dt_bias)
/// in fp32; `neg_a` = -exp(A_log) of the head.
MAGI2_HD float delta_log_decay(float a, float dt_bias, float neg_a) { return neg_a * text_softplus(a + dt_bias); }

}  // namespace magi2
