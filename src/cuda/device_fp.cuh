// Device-side fp32/bf16 helpers shared by every CUDA kernel: the same
// bf16 conversions of core/dtype.h (RNE, NaN kept),
// the CPU reference's exp (glibc expf's algorithm, bit for bit), and
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
/// bf16x2 = (bf16(hi) << 16) | bf16(lo), round to nearest even in one
/// instruction (`cvt.rn.bf16x2.f32`): the same bits as f32_to_bf16 for every
/// non-NaN value (subnormals included: no .ftz); a NaN becomes the canonical
/// one, so callers that must keep NaN payloads take f32_to_bf16 there.
__device__ __forceinline__ uint32_t bf16x2_rn(float hi, float lo) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

/// An activation element widened to fp32 (f32 as is, bf16 bits exactly).
__device__ __forceinline__ float load_f32(const float* p) { return *p; }
__device__ __forceinline__ float load_f32(const uint16_t* p) { return bf16_to_f32(*p); }
/// Stores an fp32 value in the element type (f32 as is, bf16 RNE).
__device__ __forceinline__ void store_f32(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_f32(uint16_t* p, float v) { *p = f32_to_bf16(v); }

// 2^(i/32) as doubles (correctly rounded), each less i << 47 so that adding
// k << 47 for k = 32 q + i scales it by 2^q (the exponent field starts at bit 52).
static __constant__ uint64_t kExp2Table[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};

/// exp(x) for fp32 with the bits of the CPU reference's std::exp(float), i.e.
/// glibc's expf (2.28+, the FMA build x86-64 hosts select): x / ln2 = k/32 + r
/// in double, 2^(k/32) from the table, a cubic in r with fused multiply-adds,
/// one rounding to fp32. Checked equal to Debian 12's glibc 2.36 expf on all
/// 2^32 inputs. Not correctly rounded: (float)exp((double)x) differs from it on
/// ~6e-4 of random fp32 inputs, which showed as router-weight mismatches.
/// `entry(i)` returns kExp2Table[i] (from constant or shared memory).
template <class Entry>
__device__ __forceinline__ float exp_f32_with(float x, Entry entry) {
  const uint32_t ux = __float_as_uint(x);
  const uint32_t abstop = (ux >> 20) & 0x7ffu;
  if (abstop >= 0x42bu) {  // |x| >= 88, inf or NaN
    if (ux == 0xff800000u) return 0.f;
    if (abstop >= 0x7f8u) return x + x;
    if (x > 0x1.62e42ep6f) return __int_as_float(0x7f800000);
    if (x < -0x1.9fe368p6f) return 0.f;
  }
  constexpr double kInvLn2N = 0x1.71547652b82fep+0 * 32, kShift = 0x1.8p+52;
  constexpr double kC0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, kC1 = 0x1.ebfce50fac4f3p-3 / 32 / 32,
                   kC2 = 0x1.62e42ff0c52d6p-1 / 32;
  const double xd = static_cast<double>(x);
  double kd = __fma_rn(kInvLn2N, xd, kShift);  // k in the low bits of kd
  const uint64_t ki = static_cast<uint64_t>(__double_as_longlong(kd));
  kd = __dsub_rn(kd, kShift);
  const double r = __fma_rn(kInvLn2N, xd, -kd);
  const double s = __longlong_as_double(static_cast<long long>(entry(ki % 32) + (ki << 47)));
  const double z = __fma_rn(kC0, r, kC1);
  const double r2 = __dmul_rn(r, r);
  double y = __fma_rn(kC2, r, 1.0);
  y = __fma_rn(z, r2, y);
  return static_cast<float>(__dmul_rn(y, s));
}
/// exp_f32 with the __constant__ table: fine when a warp's lanes mostly share
/// an entry; a warp reading 32 different entries serialises, so kernels with
/// many exponentials per thread use a shared-memory copy instead.
__device__ __forceinline__ float exp_f32(float x) {
  return exp_f32_with(x, [](uint64_t i) { return kExp2Table[i]; });
}
/// exp_f32 with a shared-memory copy of the table (exp2_table_to_shared).
__device__ __forceinline__ float exp_f32(float x, const uint64_t* __restrict__ table) {
  return exp_f32_with(x, [table](uint64_t i) { return table[i]; });
}

/// Copies kExp2Table into `dst` (32 entries of shared memory) with the block's
/// threads; the caller synchronises (__syncthreads) before the first use.
__device__ __forceinline__ void exp2_table_to_shared(uint64_t* dst) {
  for (int i = threadIdx.x; i < 32; i += blockDim.x) dst[i] = kExp2Table[i];
}

__device__ __forceinline__ float sigmoid_f32(float z) { return 1.0f / (1.0f + exp_f32(-z)); }
/// 2^x on the SFU (ex2.approx.ftz: ~2 ulp, subnormal results flushed to 0):
/// the softmax of the flash kernels and sigmoid_fast_f32. Deterministic.
__device__ __forceinline__ float ex2_fast_f32(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
/// fp32 sigmoid on the SFU (__expf and the fast reciprocal division): a few ulp
/// from sigmoid_f32 at a fraction of its cost (the glibc-exact exp made the
/// routed experts' SwiGLU7 pass compute-bound). Only for kernels judged within
/// bf16 tolerance (the grouped routed experts), never for the bit-exact ones.
/// Deterministic: the same bits run to run and on any layout of one GPU model.
///
/// Written as the SFU instructions with .ftz: the same bits as
/// __fdividef(1.0f, 1.0f + __expf(-z)) for every input (NaN and +-inf included)
/// in fewer instructions. The flush-to-zero cases cannot change the result:
/// an ex2 input or output below 2^-126 only ever meets `1 + e`, which is 1.0f
/// either way, and the reciprocal's argument 1 + e is >= 1, never subnormal
/// (its tiny results come from the same MUFU.RCP in both forms). Without .ftz,
/// nvcc wraps each SFU op in a subnormal range check and rescale (3 more
/// instructions each), which matter in the fused expert kernel's SwiGLU7.
__device__ __forceinline__ float sigmoid_fast_f32(float z) {
  const float t = -z * 1.4426950408889634f;  // __expf's own scaling: ex2(x log2 e), x = -z
  const float e = ex2_fast_f32(t);
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r;
}
/// tanh on the SFU (tanh.approx.f32: relative error below 2^-10.9, one MUFU).
/// Only where the result is rounded to e4m3 right after (3 mantissa bits), so
/// the approximation moves a rounding at most rarely: the W8A8 experts' Z.
__device__ __forceinline__ float tanh_fast_f32(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
/// min / max that return NaN when either input is NaN (min.NaN / max.NaN, one
/// FMNMX): the official clamp keeps NaN, where fminf / fmaxf would drop it.
__device__ __forceinline__ float min_nan_f32(float a, float b) {
  float y;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
__device__ __forceinline__ float max_nan_f32(float a, float b) {
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
/// SwiGLU7 (ops/numerics.h swiglu7_f32) from h = g / 2 and v = u + 1, with
/// g sigmoid(1.702 g) = h (1 + tanh(1.702 h)) on the SFU: the clamps become
/// h <= 3.5 and v in [-6, 8]; one MUFU and ~7 instructions where
/// swiglu7_f32 with sigmoid_fast_f32 takes two and ~11. The SFU's tanh is
/// good to ~2^-11, so the error is up to ~2^-11 |h v| absolute (relatively
/// largest where g sigmoid(1.702 g) is small, g < -2): below e4m3's rounding
/// step wherever |Z| > ~0.6. Only for the W8A8 experts' Z, which goes to e4m3
/// next (their rel-RMS to the CPU reference: 3.79e-3, against 3.81e-3 with
/// sigmoid_fast_f32; docs/perf.md).
__device__ __forceinline__ float swiglu7_half_tanh(float h, float v) {
  h = min_nan_f32(h, 3.5f);
  v = max_nan_f32(min_nan_f32(v, 8.0f), -6.0f);
  return fmaf(h, tanh_fast_f32(1.702f * h), h) * v;
}
/// sigmoid_f32 with exp_f32's table at `table` (a shared-memory copy).
__device__ __forceinline__ float sigmoid_f32(float z, const uint64_t* __restrict__ table) {
  return 1.0f / (1.0f + exp_f32(-z, table));
}

/// dot_f32 of the CPU backend by one thread: 16 partial sums over i = j
/// (mod 16) in increasing i, then the halving tree 8, 4, 2, 1. b may be f32
/// or bf16 (widened exactly, load_f32).
template <typename TB>
__device__ __forceinline__ float dot16(const float* a, const TB* b, int64_t n) {
  float acc[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) acc[j] = 0.f;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * load_f32(b + i + j);
  }
#pragma unroll
  for (int j = 0; j < 16; ++j)
    if (i + j < n) acc[j] += a[i + j] * load_f32(b + i + j);
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

/// dot_f32(x, x, n) of the CPU backend by a 16-lane half of a warp (all its
/// lanes call it, each half with its own x): lane j sums x_i^2 over i = j
/// (mod 16) in increasing i, then half_warp_tree; valid in the half's lane 0.
template <typename T>
__device__ __forceinline__ float sum_squares16(const T* x, int64_t n) {
  float acc = 0.f;
  for (int64_t i = threadIdx.x & 15; i < n; i += 16) {
    const float v = load_f32(x + i);
    acc += v * v;
  }
  return half_warp_tree(acc);
}

/// Weight group of row r (Groups::cu packed as int4, as group_of on the CPU).
__device__ __forceinline__ int group_of(int4 cu, int groups, int64_t r) {
  int m = 0;
  while (m + 1 < groups && r >= (m == 0 ? cu.y : cu.z)) ++m;
  return m;
}

}  // namespace magi2::cuda::dev
