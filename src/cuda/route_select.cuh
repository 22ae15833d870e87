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

/// Does candidate (va, a) rank before (vb, b), where id -1 marks an empty slot
/// that ranks after everything?
__device__ __forceinline__ bool slot_before(float va, int a, float vb, int b) {
  if (a < 0) return false;
  if (b < 0) return true;
  return ranks_before(va, a, vb, b);
}

__device__ __forceinline__ void slot_order(float& va, int& a, float& vb, int& b) {
  if (slot_before(vb, b, va, a)) {
    const float tv = va;
    const int ti = a;
    va = vb, a = b, vb = tv, b = ti;
  }
}

/// The first `take` picks of one (token, head) into ord[0 .. take) for ne <= 256:
/// each lane holds its (up to) 8 experts e = lane + 32 j in registers, sorted
/// once by Batcher's 19-comparator network; each pick is the warp's best lane
/// head (a butterfly, so every lane learns it) and the winning lane shifts its
/// list. About a third of the instructions of rescanning shared memory per pick.
__device__ __forceinline__ void route_pick_registers(const float* s, const float* bs, int ne, int take, int* ord) {
  const int wl = threadIdx.x & 31;
  float v[8];
  int id[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int e = wl + 32 * j;
    id[j] = e < ne ? e : -1;
    v[j] = e < ne ? s[e] + bs[e] : 0.f;
  }
#define MAGI2_SLOT_CS(a, b) slot_order(v[a], id[a], v[b], id[b])
  MAGI2_SLOT_CS(0, 1); MAGI2_SLOT_CS(2, 3); MAGI2_SLOT_CS(4, 5); MAGI2_SLOT_CS(6, 7);
  MAGI2_SLOT_CS(0, 2); MAGI2_SLOT_CS(1, 3); MAGI2_SLOT_CS(4, 6); MAGI2_SLOT_CS(5, 7);
  MAGI2_SLOT_CS(1, 2); MAGI2_SLOT_CS(5, 6);
  MAGI2_SLOT_CS(0, 4); MAGI2_SLOT_CS(1, 5); MAGI2_SLOT_CS(2, 6); MAGI2_SLOT_CS(3, 7);
  MAGI2_SLOT_CS(2, 4); MAGI2_SLOT_CS(3, 5);
  MAGI2_SLOT_CS(1, 2); MAGI2_SLOT_CS(3, 4); MAGI2_SLOT_CS(5, 6);
#undef MAGI2_SLOT_CS
  for (int q = 0; q < take; ++q) {
    float best_v = v[0];
    int best = id[0];
    for (int off = 16; off >= 1; off /= 2) {
      const int ob = __shfl_xor_sync(0xffffffffu, best, off);
      const float ov = __shfl_xor_sync(0xffffffffu, best_v, off);
      if (slot_before(ov, ob, best_v, best)) best = ob, best_v = ov;
    }
    if (id[0] == best) {  // the one lane that held the pick moves to its next candidate
#pragma unroll
      for (int j = 0; j < 7; ++j) v[j] = v[j + 1], id[j] = id[j + 1];
      id[7] = -1;
    }
    if (wl == 0) ord[q] = best;
  }
}

/// The first `take` picks for any ne: rescans the scores in shared memory once
/// per pick; the q-th pick is the best of the experts ranking after pick q - 1,
/// so no marks are needed.
__device__ __forceinline__ void route_pick_scan(const float* s, const float* bs, int ne, int take, int* ord) {
  const int wl = threadIdx.x & 31;
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
}

/// Called by all 32 lanes of a warp. `s` [ne]: the token's sigmoid scores,
/// `bs` [ne]: the head's bias, `ord` [k + 1]: the warp's shared scratch;
/// `mi` = h * T + n indexes margin [MH, T], routes mi * k .. of idx_out,
/// w_out and forced (nullptr: natural routing; out-of-range ids are clamped).
/// Both pick paths select the same experts in the same order (one total order).
__device__ __forceinline__ void route_select(const float* s, const float* bs, int ne, int k, int* ord, int64_t mi,
                                             const int32_t* __restrict__ forced, float* __restrict__ margin,
                                             int32_t* __restrict__ idx_out, float* __restrict__ w_out,
                                             float route_scale, bool normalize) {
  const int wl = threadIdx.x & 31;
  const int take = k + 1 < ne ? k + 1 : ne;
  if (ne <= 256)
    route_pick_registers(s, bs, ne, take, ord);
  else
    route_pick_scan(s, bs, ne, take, ord);
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
