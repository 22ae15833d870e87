// The router's selection for one (token, head) by one warp, shared by the
// reference router (moe.cu) and the fused one (route_fused.cu): top-k of the
// selection scores sigmoid + bias under the CPU backend's total order
// (descending, NaN first, lowest expert id on ties; src/cpu/moe.cpp), the
// margin between the k-th and (k+1)-th pick, forced routing, and the
// weights p / max(sum |p|, 1e-12) * route_scale (spec §8.2). Include only from .cu files.
#pragma once

#include <cstdint>

namespace magi2::cuda::dev {

/// The CPU's strict order: does expert a (selection score va) rank before expert b?
__device__ __forceinline__ bool ranks_before(float va, int a, float vb, int b) {
  const bool na = isnan(va), nb = isnan(vb);
  if (na || nb) return na && (!nb || a < b);
  if (va != vb) return va > vb;
  return a < b;
}

/// Called by all 32 lanes of a warp. `s` [ne]: the token's sigmoid scores,
/// `bs` [ne]: the head's bias, `ord` [k + 1]: the warp's shared scratch;
/// `mi` = h * T + n indexes margin [MH, T], routes mi * k .. of idx_out,
/// w_out and forced (nullptr: natural routing; out-of-range ids are clamped).
/// The q-th pick is the best of the experts ranking after pick q - 1, so no marks are needed.
__device__ __forceinline__ void route_select(const float* s, const float* bs, int ne, int k, int* ord, int64_t mi,
                                             const int32_t* __restrict__ forced, float* __restrict__ margin,
                                             int32_t* __restrict__ idx_out, float* __restrict__ w_out,
                                             float route_scale, bool normalize) {
  const int wl = threadIdx.x & 31;
  const int take = k + 1 < ne ? k + 1 : ne;
  int prev = -1;
  float prev_v = 0.f;
  for (int q = 0; q < take; ++q) {
    int best = -1;
    float best_v = 0.f;
    for (int e = wl; e < ne; e += 32) {
      const float v = s[e] + bs[e];
      if (prev >= 0 && !ranks_before(prev_v, prev, v, e)) continue;
      if (best < 0 || ranks_before(v, e, best_v, best)) best = e, best_v = v;
    }
    for (int off = 16; off >= 1; off /= 2) {
      const int ob = __shfl_xor_sync(0xffffffffu, best, off);
      const float ov = __shfl_xor_sync(0xffffffffu, best_v, off);
      if (ob >= 0 && (best < 0 || ranks_before(ov, ob, best_v, best))) best = ob, best_v = ov;
    }
    prev = best;
    prev_v = best_v;
    if (wl == 0) ord[q] = best;
  }
  __syncwarp();
  if (wl == 0) {
    const int64_t base = mi * k;
    if (margin != nullptr)
      margin[mi] = k < ne ? (s[ord[k - 1]] + bs[ord[k - 1]]) - (s[ord[k]] + bs[ord[k]]) : INFINITY;
    int32_t* idx = idx_out + base;
    for (int j = 0; j < k; ++j) {
      int e = ord[j];
      if (forced != nullptr) {
        e = forced[base + j];
        e = e < 0 ? 0 : (e > ne - 1 ? ne - 1 : e);
      }
      idx[j] = e;
    }
    float l1 = 0.f;
    for (int j = 0; j < k; ++j) l1 += fabsf(s[idx[j]]);
    const float denom = normalize ? ((l1 < 1e-12f) ? 1e-12f : l1) : 1.0f;  // std::max(l1, 1e-12f)
    for (int j = 0; j < k; ++j) {
      const float pn = normalize ? s[idx[j]] / denom : s[idx[j]];
      w_out[base + j] = pn * route_scale;
    }
  }
  __syncwarp();
}

}  // namespace magi2::cuda::dev
