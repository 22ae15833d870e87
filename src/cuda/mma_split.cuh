// fp32 contractions on bf16 tensor cores for the opt-in fast kernels
// (fused_kernels.h): a bf16 activation x times an fp32 weight w is x * hi +
// x * mid + x * lo with w = hi + mid + lo split into three bf16 terms. Every
// product of two bf16 values is exact in fp32 and the three terms carry 24
// significand bits, so the result differs from an fp32 GEMM only in the
// accumulation rounding (the official code's fp32 einsum/matmul, spec §8.2
// and §9.2, has an implementation-defined order too).
//
// Weights are stored "fragment native" so that each lane of a warp loads its
// B operand of mma.m16n8k16 with one 16-byte load: unit (chunk q, split s,
// n-tile nt, lane) holds the 8 values w[k0 + 8 (lane % 4) + j][8 nt + lane / 4],
// j = 0..7, k0 = 32 q. The A operand (row-major bf16 activations) is loaded the
// same way: lane (g = lane / 4, c = lane % 4) reads the 8 contiguous values
// x[row][k0 + 8 c + j] of rows g and g + 8. Both sides then assign physical
// k = k0 + 8 c + 4 u + {0, 1, 2, 3} to the logical k {2c, 2c + 1, 2c + 8,
// 2c + 9} of mma step u (u = 0, 1): the same permutation of k on both operands
// leaves the dot product unchanged. Include only from .cu files.
#pragma once

#include <cstdint>

#include "cuda/device_fp.cuh"

namespace magi2::cuda::dev {

constexpr int kSplits = 3;  ///< bf16 terms per fp32 weight
constexpr int kChunkK = 32; ///< k values per fragment-native chunk (two mma steps)

/// hi, mid, lo: each the RNE bf16 of what the previous terms leave; the
/// remainders v - hi and (v - hi) - mid are exact in fp32.
__device__ __forceinline__ void split3_bf16(float v, uint16_t out[kSplits]) {
  float rest = v;
#pragma unroll
  for (int s = 0; s < kSplits; ++s) {
    out[s] = f32_to_bf16(rest);
    rest = rest - bf16_to_f32(out[s]);
  }
}

/// Packs 8 bf16 bit patterns into a 16-byte store.
__device__ __forceinline__ uint4 pack8(const uint16_t v[8]) {
  uint4 u;
  u.x = static_cast<uint32_t>(v[0]) | (static_cast<uint32_t>(v[1]) << 16);
  u.y = static_cast<uint32_t>(v[2]) | (static_cast<uint32_t>(v[3]) << 16);
  u.z = static_cast<uint32_t>(v[4]) | (static_cast<uint32_t>(v[5]) << 16);
  u.w = static_cast<uint32_t>(v[6]) | (static_cast<uint32_t>(v[7]) << 16);
  return u;
}

/// Writes the three split units of one lane: `v` are its 8 fp32 values (j = 0..7),
/// `unit(s)` the uint4 index of split s.
template <class Unit>
__device__ __forceinline__ void store_split_units(const float v[8], uint4* __restrict__ dst, Unit unit) {
  uint16_t parts[kSplits][8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    uint16_t p[kSplits];
    split3_bf16(v[j], p);
#pragma unroll
    for (int s = 0; s < kSplits; ++s) parts[s][j] = p[s];
  }
#pragma unroll
  for (int s = 0; s < kSplits; ++s) dst[unit(s)] = pack8(parts[s]);
}

/// c += A * B for one m16n8k16 tile (bf16 in, fp32 accumulate). a0/a2: row g
/// (k 2c.. and 2c+8..), a1/a3: row g + 8; b0: k 2c.., b1: k 2c+8.. (PTX ISA fragment layout).
__device__ __forceinline__ void mma_bf16_16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// Both mma steps of one 32-k chunk: `lo` / `hi` are the lane's A loads of rows
/// g and g + 8, `b` its B unit (see the file comment for the k permutation).
__device__ __forceinline__ void mma_chunk(float c[4], const uint4& lo, const uint4& hi, const uint4& b) {
  mma_bf16_16816(c, lo.x, hi.x, lo.y, hi.y, b.x, b.y);
  mma_bf16_16816(c, lo.z, hi.z, lo.w, hi.w, b.z, b.w);
}

/// The j-th bf16 value (0..7) of a 16-byte load, as fp32.
__device__ __forceinline__ float bf16_at(const uint4& v, int j) {
  const uint32_t w = j < 2 ? v.x : j < 4 ? v.y : j < 6 ? v.z : v.w;
  return bf16_to_f32(static_cast<uint16_t>((j & 1) ? (w >> 16) : (w & 0xffffu)));
}

}  // namespace magi2::cuda::dev
