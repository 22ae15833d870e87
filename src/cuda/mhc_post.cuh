// The mHC post + residual's arithmetic on one 16-byte column step (spec
// magi2-dit.md §9.6) for the fast kernels that update the state
// (mhc_fused.cu's ring and lean kernels, mhc_post_logits.cu): the new values
// of 8 columns of the 4 streams in the CPU reference's fp32 operations and
// order (src/cpu/mhc.cpp), so every kernel writes the same bytes. Include only
// from .cu files.
#pragma once

#include <cstdint>

#include "cuda/device_fp.cuh"
#include "cuda/mma_split.cuh"  // bf16_at, pack8

namespace magi2::cuda::dev {

constexpr int kMhcStreams = 4;

/// The new state of one column step before rounding: per stream i and element
/// e, one fp32 accumulation of the 4-term mix sum_j m[i][j] old[j] and then the
/// post term hp[i] o (the CPU's order; one rounding follows). x: the 4 streams'
/// 8 bf16 values, ov: o's.
__device__ __forceinline__ void post_mix(const uint4 (&x)[kMhcStreams], const uint4& ov,
                                         const float (&hp)[kMhcStreams], const float (&m)[kMhcStreams][kMhcStreams],
                                         float (&acc)[kMhcStreams][8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    float old[kMhcStreams];
#pragma unroll
    for (int jj = 0; jj < kMhcStreams; ++jj) old[jj] = bf16_at(x[jj], e);
    const float oc = bf16_at(ov, e);
#pragma unroll
    for (int i = 0; i < kMhcStreams; ++i) {
      float a = 0.f;
#pragma unroll
      for (int jj = 0; jj < kMhcStreams; ++jj) a += m[i][jj] * old[jj];
      a += hp[i] * oc;
      acc[i][e] = a;
    }
  }
}

/// The 32 sums of a step rounded to bf16 (f32_to_bf16's bits): in pairs with
/// one cvt.rn.bf16x2.f32 (the same bits for every non-NaN value, subnormals
/// included); a step whose sums hold a NaN (their fp32 total is NaN; two
/// cancelling infinities only take the exact path needlessly) rounds each
/// value with f32_to_bf16 instead and keeps the payload.
__device__ __forceinline__ void post_round(const float (&acc)[kMhcStreams][8], uint4 (&out)[kMhcStreams]) {
  float total[kMhcStreams];
#pragma unroll
  for (int i = 0; i < kMhcStreams; ++i)
    total[i] = ((acc[i][0] + acc[i][1]) + (acc[i][2] + acc[i][3])) + ((acc[i][4] + acc[i][5]) + (acc[i][6] + acc[i][7]));
  if (!isnan((total[0] + total[1]) + (total[2] + total[3]))) {
#pragma unroll
    for (int i = 0; i < kMhcStreams; ++i)
      out[i] = make_uint4(bf16x2_rn(acc[i][1], acc[i][0]), bf16x2_rn(acc[i][3], acc[i][2]),
                          bf16x2_rn(acc[i][5], acc[i][4]), bf16x2_rn(acc[i][7], acc[i][6]));
  } else {
#pragma unroll
    for (int i = 0; i < kMhcStreams; ++i) {
      uint16_t h[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) h[e] = f32_to_bf16(acc[i][e]);
      out[i] = pack8(h);
    }
  }
}

/// sq += the squares of the 32 bf16 values of a rounded step (a lane's share
/// of the new row's sum of squares, MhcPostResParams::ss).
__device__ __forceinline__ void post_add_squares(float& sq, const uint4 (&out)[kMhcStreams]) {
#pragma unroll
  for (int i = 0; i < kMhcStreams; ++i)
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float v = bf16_at(out[i], e);
      sq += v * v;
    }
}

/// A 16-byte store with evict-first (st.global.cs): the new state is not read
/// again before its kernel ends, so it should not displace state still to be read.
__device__ __forceinline__ void st_global_cs(void* p, const uint4& v) {
  asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

}  // namespace magi2::cuda::dev
