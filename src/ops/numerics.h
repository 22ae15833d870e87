// Scalar numerics shared by the host and the device: one definition of each
// element-wise formula whose bytes must agree between the CPU reference, the
// host-side sampler and the CUDA kernels. Light header: no library includes,
// compiles as plain C++ and under nvcc (functions are __host__ __device__ there).
//
// Every function performs the official code's fp32 operations one rounding at a
// time, in the official order. Both compilers must leave the expressions
// uncontracted (no FMA): the project builds host code with -ffp-contract=off and
// device code with --fmad=false, which keeps these bit-identical everywhere.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MAGI2_HD __host__ __device__ __forceinline__
#else
#define MAGI2_HD inline
#endif

namespace magi2 {

/// Classifier-free guidance of one element (spec pipeline §5.4; official
/// Magi2PreviewSampler.cfg_velocity with the released config):
/// uncond + scale * (cond - uncond), one fp32 rounding per operation.
MAGI2_HD float cfg_combine_f32(float cond, float uncond, float scale) {
  const float diff = cond - uncond;
  const float scaled = scale * diff;
  return uncond + scaled;
}

/// The scalars of one FlowUniPC step i (spec pipeline §5.3; official
/// FlowUniPCMultistepScheduler.step): the x0 prediction's sigma, the UniC
/// corrector over interval i-1 (when i > 0) and the UniP predictor over
/// interval i. Built on the host by FlowUniPC::step_table(); 16 floats, so a
/// table of S steps is an [S, 16] f32 tensor the device reads by step index.
struct UniPcStepCoef {
  float sigma = 0;      ///< sigmas[i]
  float corrector = 0;  ///< 1: apply UniC to the incoming sample (i > 0)
  float c_order = 1;    ///< corrector order (1 or 2)
  float c_A = 0, c_E_phi = 0, c_E_B = 0, c_inv_r1 = 0, c_rho0 = 0, c_rho1 = 0;
  float p_order = 1;    ///< predictor order (1 or 2)
  float p_A = 0, p_E_phi = 0, p_E_B = 0, p_inv_r1 = 0;
  float pad0 = 0, pad1 = 0;
};
static_assert(sizeof(UniPcStepCoef) == 16 * sizeof(float), "UniPcStepCoef is one [16] f32 row");

/// One FlowUniPC step on one element, in place. x: the sample (in: x_i, out:
/// x_{i+1}); v: the model's velocity at x_i; last: the corrected sample the
/// previous predictor started from (out: this step's); m0, m1: the newest and
/// the previous x0 predictions (out: shifted by one). Operation order as the
/// official code (FlowUniPC::correct / predict document the expressions):
///   m = x - sigma*v;  UniC: x = (A*last - E_phi*m0) - E_B*res_c;
///   UniP: x = (A*x - E_phi*m) - E_B*res_p, D1 = (m_prev - m) * f32(1/r1).
MAGI2_HD void flow_unipc_element(const UniPcStepCoef& c, float v, float& x, float& last, float& m0, float& m1) {
  const float sv = c.sigma * v;
  const float m_new = x - sv;
  if (c.corrector != 0.0f) {
    const float t1 = c.c_A * last;
    const float t2 = c.c_E_phi * m0;
    const float base = t1 - t2;
    float res;
    if (c.c_order == 1.0f) {
      const float d1t = m_new - m0;
      const float w = c.c_rho0 * d1t;
      res = w + 0.0f;  // official: python 0 + tensor
    } else {
      const float dm = m1 - m0;
      const float d1 = dm * c.c_inv_r1;
      const float a = c.c_rho0 * d1;
      const float d1t = m_new - m0;
      const float b = c.c_rho1 * d1t;
      res = a + b;
    }
    const float corr = c.c_E_B * res;
    x = base - corr;
  }
  m1 = m0;
  m0 = m_new;
  last = x;
  const float t1 = c.p_A * x;
  const float t2 = c.p_E_phi * m0;
  const float base = t1 - t2;
  if (c.p_order == 1.0f) {
    const float corr = c.p_E_B * 0.0f;  // the official scalar times a python 0: keep the signed zero
    x = base - corr;
  } else {
    const float dm = m1 - m0;
    const float d1 = dm * c.p_inv_r1;
    const float res = 0.5f * d1;  // rhos_p = [0.5] for order 2
    const float corr = c.p_E_B * res;
    x = base - corr;
  }
}

// fp32 <-> its bit pattern: the intrinsics on the device, a memcpy on the host.
#if defined(__CUDA_ARCH__)
/// The fp32 value of a bit pattern.
MAGI2_HD float numerics_bits_f32(uint32_t u) { return __uint_as_float(u); }
/// The bit pattern of an fp32 value.
MAGI2_HD uint32_t numerics_f32_bits(float f) { return __float_as_uint(f); }
#else
/// The value of type To with the bytes of `v` (sizeof(To) == sizeof(From)).
template <typename To, typename From>
MAGI2_HD To numerics_host_bit_cast(From v) {
  static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the size");
  To out;
  __builtin_memcpy(&out, &v, sizeof(To));
  return out;
}
/// The fp32 value of a bit pattern.
MAGI2_HD float numerics_bits_f32(uint32_t u) { return numerics_host_bit_cast<float>(u); }
/// The bit pattern of an fp32 value.
MAGI2_HD uint32_t numerics_f32_bits(float f) { return numerics_host_bit_cast<uint32_t>(f); }
#endif

/// OCP float8 e4m3fn bits -> fp32, exact: 1 sign, 4 exponent (bias 7), 3
/// mantissa bits; exponent 0 = subnormals m * 2^-9; S.1111.111 is NaN (the
/// only one); there is no infinity. Same values as torch's float8_e4m3fn.
MAGI2_HD float e4m3_bits_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu, man = b & 0x7u;
  if (exp == 0xfu && man == 0x7u) return numerics_bits_f32(sign | 0x7fc00000u);
  if (exp == 0) {
    if (man == 0) return numerics_bits_f32(sign);
    // m * 2^-9 with m in 1..7: normalise the mantissa into fp32's 1.x form.
    uint32_t e = 127 - 6, m = man;  // 2^-6 is the smallest normal; subnormal = 0.m * 2^-6
    while ((m & 0x8u) == 0) m <<= 1, --e;
    return numerics_bits_f32(sign | (e << 23) | ((m & 0x7u) << 20));
  }
  return numerics_bits_f32(sign | ((exp + 120u) << 23) | (man << 20));
}

/// fp32 -> float8 e4m3fn bits, round-to-nearest-even, saturating: magnitudes
/// above 448 (the largest finite value) and infinities become +-448 (0x7e /
/// 0xfe); NaN becomes NaN with its sign (0x7f / 0xff). Bit-identical to torch's
/// `.to(torch.float8_e4m3fn)` (c10's fp8e4m3fn_from_fp32_value, the same
/// integer rounding steps) for every input whose magnitude is at most 464;
/// above that torch returns NaN where this saturates (the block quantiser
/// never gets there: |w / scale| <= 448).
MAGI2_HD uint8_t f32_to_e4m3_bits(float f) {
  const uint32_t u = numerics_f32_bits(f);
  const uint32_t sign = u & 0x80000000u;
  uint32_t a = u ^ sign;
  uint8_t r;
  if (a > 0x7f800000u) {
    r = 0x7f;                         // NaN
  } else if (a >= 0x43e00000u) {      // >= 448 (ties at 464 round down to 448 anyway)
    r = 0x7e;
  } else if (a < (121u << 23)) {      // below 2^-6, the smallest normal: subnormal or zero
    // Adding 2^14 puts the 2^-9 subnormal unit at fp32's last mantissa bit, so
    // the fp32 addition rounds to nearest even exactly once (as torch).
    const float shifted = numerics_bits_f32(a) + numerics_bits_f32(141u << 23);
    r = static_cast<uint8_t>(numerics_f32_bits(shifted) - (141u << 23));
  } else {
    const uint32_t odd = (a >> 20) & 1u;  // the kept mantissa's last bit, for ties to even
    a += (static_cast<uint32_t>(7 - 127) << 23) + 0x7ffffu + odd;
    r = static_cast<uint8_t>(a >> 20);
  }
  return static_cast<uint8_t>(r | (sign >> 24));
}

/// The block edge of the FP8 expert weights' scales (DeepSeek-V3 style): one
/// fp32 scale per 128 x 128 tile of the last two dimensions.
constexpr int kFp8Block = 128;
/// The largest finite e4m3fn magnitude: a block's scale is amax / 448.
constexpr float kE4m3Max = 448.0f;

/// The dequantised fp32 value of one FP8 weight, q * scale (scale = the
/// tensor's `_scale_inv` entry of its block), one fp32 rounding. The W8A16
/// expert path then rounds it to bf16 (RNE) like any bf16 weight: that bf16
/// value is what both backends multiply by.
MAGI2_HD float fp8_dequant_f32(uint8_t q, float scale) { return e4m3_bits_to_f32(q) * scale; }

/// The activation group of the W8A8 expert path (docs/fp8.md): one fp32 scale
/// per row and per 128 consecutive elements along K (1 x 128, DeepSeek-V3's
/// act_quant / the common per_token_group_quant_fp8); the last group of a row
/// whose width is not a multiple of 128 is shorter.
constexpr int kFp8ActGroup = 128;

/// One step of a group's amax: max(m, |v|) with NaN sticky (a NaN element makes
/// the group's scale NaN, so the NaN reaches the GEMM output as in bf16). Order
/// independent, so a warp reduction gives the host loop's value bit for bit.
MAGI2_HD float fp8_amax_step(float m, float v) {
  const float a = v < 0.0f ? -v : v;
  if (m != m) return m;
  return (a > m || a != a) ? a : m;
}

/// The dequantisation scale of an activation group from its amax: amax / 448
/// (fp32 division, RNE), 1 for an all-zero group (as the weight quantiser;
/// its values are all 0 either way).
MAGI2_HD float fp8_act_scale(float amax) { return amax == 0.0f ? 1.0f : amax / kE4m3Max; }

/// One activation element quantised with its group's scale: e4m3(v / scale),
/// fp32 division (RNE) then the saturating e4m3 rounding (|v / scale| can
/// exceed 448 by an ulp after the scale's rounding: it saturates to 448).
MAGI2_HD uint8_t fp8_act_quant(float v, float scale) { return f32_to_e4m3_bits(v / scale); }

/// 1 / scale (fp32 division, RNE): fp8_act_quant_rcp's third argument, made
/// once per activation group.
MAGI2_HD float fp8_act_rcp(float scale) { return 1.0f / scale; }

/// The e4m3 bits of two non-negative fp32 values, f32_to_e4m3_bits(lo) in bits
/// 0-7 and f32_to_e4m3_bits(hi) in bits 8-15. On sm_89 and later one
/// cvt.rn.satfinite.e4m3x2.f32, which gives the software rounding's bits on
/// every non-NaN input (all 2^32 patterns are compared on the GPU by
/// test_cuda_fp8_w8a8's E4m3Conversion); elsewhere the software rounding.
MAGI2_HD uint32_t e4m3_bits_pair(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<uint32_t>(f32_to_e4m3_bits(lo)) | static_cast<uint32_t>(f32_to_e4m3_bits(hi)) << 8;
#endif
}

/// fp8_act_quant(v, scale) bit for bit, with rcp = fp8_act_rcp(scale) from the
/// caller: the fast path multiplies instead of dividing and rounds in hardware
/// (e4m3_bits_pair), the division stays for the rare inputs near a rounding
/// boundary. Why it is exact: q = v * rcp and the reference quotient
/// fl(v / scale) both lie within 3 fp32 ulps (of v / scale's binade) of the
/// exact v / scale, so at most ~7 fp32 values apart even across a binade edge.
/// When the e4m3 rounding of |q| - 16 ulps and of |q| + 16 ulps agree, every
/// value between them (the reference quotient among them) rounds the same way,
/// the rounding being monotone. Otherwise, and for q not finite or near
/// overflow (rcp infinite for a tiny scale, NaN), the division decides.
/// Device callers use it; the CPU keeps fp8_act_quant (same bytes).
MAGI2_HD uint8_t fp8_act_quant_rcp(float v, float scale, float rcp) {
  constexpr uint32_t kWindow = 16;  // fp32 ulps each side of q
  const uint32_t u = numerics_f32_bits(v * rcp), a = u & 0x7fffffffu;
  if (a < 0x7f000000u) {
    const uint32_t lo = a > kWindow ? a - kWindow : 0u, hi = a + kWindow;
    const uint32_t pair = e4m3_bits_pair(numerics_bits_f32(lo), numerics_bits_f32(hi));
    if ((pair & 0xffu) == (pair >> 8)) return static_cast<uint8_t>((pair & 0xffu) | ((u >> 24) & 0x80u));
  }
  return fp8_act_quant(v, scale);
}

/// FP8 attention (AttentionParams::fp8; docs/fp8.md): Q, K and V as e4m3 with
/// one scale per query row and head (fp8_act_scale of the row's amax over
/// the head dim), one per 128-token key tile and head for K and likewise for V (tiles
/// counted from each sample's first token), and P as e4m3(2^8 p): p <= 1, so
/// the factor keeps values down to 2^-17 in e4m3's subnormal range.
constexpr int kFp8AttnTile = 128;
/// log2 of P's factor (kFp8AttnTile's comment): exact in the exponent.
constexpr float kFp8AttnPLog2 = 8.0f;

/// 2^x from FMA-pipe operations only (no SFU; FlashAttention-4's software
/// exponential). x is clamped below at -125 (so -inf gives 2^-125 rather than
/// 0, and the result is always normal) and must be below 128; NaN stays NaN.
/// x is rounded to the nearest integer j by adding 1.5 * 2^23 (the sum's low
/// mantissa bits are j), 2^(x - j) on [-0.5, 0.5] is a degree-3 polynomial
/// fitted for relative error with p(0) = 1, so 2^j is exact (at most 1.02e-4
/// over the range, against ex2.approx's ~2^-22), and j is added to its
/// exponent bits. FP8 attention's softmax computes part of its exponentials
/// with it: the SFU does 16 a clock per SM, which the FP8 wgmma's 2 x 128
/// products per (row, key) outpace.
MAGI2_HD float exp2_fma_f32(float x) {
#if defined(__CUDA_ARCH__)
#define MAGI2_FMA_F32 __fmaf_rn
#else
#define MAGI2_FMA_F32 __builtin_fmaf
#endif
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  x = x < -125.0f ? -125.0f : x;
  const float t = x + kRound;
  const float f = x - (t - kRound);
  const float p = MAGI2_FMA_F32(
      MAGI2_FMA_F32(MAGI2_FMA_F32(0.055008213967084885f, f, 0.24221037328243256f), f, 0.693282961845398f), f, 1.0f);
#undef MAGI2_FMA_F32
  return numerics_bits_f32(numerics_f32_bits(p) + (numerics_f32_bits(t) << 23));
}

/// The factor a W8A8 K-block's fp32 partial sum is multiplied by before it is
/// added to the fp32 accumulator: a_scale * w_scale, one fp32 rounding (the
/// order of CUTLASS's sm90 blockwise-scaled mainloop: acc += partial * (sa * sb)).
MAGI2_HD float fp8_block_scale(float a_scale, float w_scale) { return a_scale * w_scale; }

/// Z before W_down on the W8A8 routed experts (docs/fp8.md). SwiGLU7's output
/// is bounded: the gate's factor g sigmoid(1.702 g) lies in (-0.17, 7] (g is
/// clamped above at 7) and up + 1 in [-6, 8], so |z| < 56 and 8 z fits e4m3's
/// 448 without a group amax; the fused kernel quantises each 32 columns of Z
/// as they are made. W_down's 128 x 128 block scales fold into that factor:
/// for K-block b (128 intermediate columns) and N-block n (128 output columns)
/// of the expert, Z's e4m3 is q = e4m3(z * fp8_z_factor(ws[b][n], smax[n])),
/// smax[n] = the largest ws[.][n] (fp8_amax_step over the column block's
/// scales, NaN sticky), and output column c of block n is (the fp32 sum over
/// k of q[k] x e4m3 W_down[k][c]) * fp8_z_unscale(smax[n]). ws / smax <= 1, so
/// a block with a smaller scale than the column's largest keeps fewer of its
/// small z values above e4m3's normal range (2^-6); no value saturates.
constexpr float kFp8ZFactor = 8.0f;
/// 8 (ws / smax): one fp32 division (RNE), the factor 8 exact; 0 where smax is
/// 0 (all of the column block's weights are 0), NaN where smax is NaN.
MAGI2_HD float fp8_z_factor(float ws, float smax) { return smax == 0.0f ? 0.0f : kFp8ZFactor * (ws / smax); }
/// smax / 8, exact: what undoes fp8_z_factor's 8 and the block's scale.
MAGI2_HD float fp8_z_unscale(float smax) { return smax * (1.0f / kFp8ZFactor); }

/// True when the fp32 bit pattern is not a finite number (NaN or +-inf); safe
/// under any floating-point flags since it looks only at the exponent bits.
MAGI2_HD bool is_nonfinite_bits(uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u; }

/// SwiGLU7 of one (gate, up) pair in fp32 (spec magi2-dit.md §4.3 dense MLP,
/// §8.3 routed experts; official swiglu7): gate clamped above at 7, up to
/// [-7, 7], then (g * sigmoid(1.702 g)) * (up + 1), one fp32 rounding per
/// operation; the caller rounds to bf16. Comparisons rather than fmin/fmax keep
/// NaN, as the official clamp does. `sigmoid`: the caller's fp32 sigmoid (the
/// glibc-exact one on the CPU and in the bit-exact CUDA kernels; the SFU one in
/// the grouped routed experts, which differ from the CPU by GEMM summation order
/// anyway and are judged within bf16 tolerance).
template <typename Sigmoid>
MAGI2_HD float swiglu7_f32(float g, float u, Sigmoid sigmoid) {
  g = g > 7.0f ? 7.0f : g;
  u = u > 7.0f ? 7.0f : (u < -7.0f ? -7.0f : u);
  return (g * sigmoid(1.702f * g)) * (u + 1.0f);
}

}  // namespace magi2
