// The opt-in fused router (fused_kernels.h; spec magi2-dit.md §8.2): per
// head, the fp32 logits [T, E] = r_h [T, dh] (bf16) x gate_h^T on bf16 tensor
// cores with the gate split in three bf16 terms (mma_split.cuh), then in the
// same kernel the reference's sigmoid (glibc-exact exp), selection,
// normalisation and margin (route_select.cuh), by one of two selections with
// the same bytes (RouteSelect, below). The params were checked by
// moe_route (moe.cu). FLOPs at 272p: 3 x 2 x 29,872 x 3,072 x 256 = 141 G on
// the tensor cores; reads 183 MB of r.
#include <cstdint>

#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/fused_kernels.h"
#include "cuda/mma_split.cuh"
#include "cuda/route_select.cuh"
#include "cuda/stage_ring.cuh"

namespace magi2::cuda {

namespace {

using namespace dev;

constexpr int kMaxTopK = 32;    // as the reference router
constexpr int kMaxExperts = 256;
constexpr int kRtTokens = 64;   // per block: 2 token groups of 32 (2 m-tiles each)
constexpr int kRtWarps = 8;     // token group = warp / 4, expert quarter = warp % 4
constexpr int kMaxTilesPerWarp = kMaxExperts / 32;

__host__ __device__ constexpr int score_ld(int ne) { return ne + 4; }  // fewer bank conflicts on the C stores

size_t route_fused_shared(int ne) {
  return (static_cast<size_t>(kRtTokens) * score_ld(ne) + ne) * 4;
}

// Thread per (head h, chunk q, n-tile nt, lane): the 8 values gate[h E + e][d0 + j]
// of its fragment-native unit (k = d, n = e), split in three.
__global__ void gate_split_kernel(const float* __restrict__ gate, int mh, int ne, int64_t dh,
                                  uint4* __restrict__ out) {
  const int64_t nq = dh / kChunkK, ntiles = ne / 8;
  const int64_t units = mh * nq * ntiles * 32;
  const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= units) return;
  const int lane = static_cast<int>(u % 32);
  const int64_t nt = (u / 32) % ntiles;
  const int64_t q = (u / (32 * ntiles)) % nq;
  const int64_t h = u / (32 * ntiles * nq);
  const int64_t e = nt * 8 + lane / 4;
  const float* src = gate + (h * ne + e) * dh + q * kChunkK + 8 * (lane % 4);
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = src[j];
  store_split_units(v, out, [&](int s) { return (((h * nq + q) * kSplits + s) * ntiles + nt) * 32 + lane; });
}

// The gate as the A operand of logits^T = gate_h r_h^T (route_logits_t):
// thread per (head h, chunk q, m-tile mt of 16 experts, mma step u, lane (g, c)),
// holding A's registers a0..a3 of step u: experts e = 16 mt + g (a0, a2) and
// e + 8 (a1, a3) at d = 32 q + 8 c + 4 u + {0, 1} (a0, a1) and + {2, 3} (a2, a3),
// the k permutation of mma_split.cuh. Units are ordered as route_logits_t
// consumes them, one stage (chunk q, m-tile w of each expert quarter) after
// another: mt = E/4 eq + 16 w, unit (((((h nq + q) E/64 + w) 3 + s) 4 + eq) 2 + u)
// 32 + lane, so a stage is kGateStageBytes of consecutive bytes.
__global__ void gate_split_t_kernel(const float* __restrict__ gate, int mh, int ne, int64_t dh,
                                    uint4* __restrict__ out) {
  const int64_t nq = dh / kChunkK, mtiles = ne / 16, mtw = ne / 64;
  const int64_t units = mh * nq * mtiles * 2 * 32;
  const int64_t un = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (un >= units) return;
  const int lane = static_cast<int>(un % 32);
  const int64_t u = (un / 32) % 2, mt = (un / 64) % mtiles;
  const int64_t q = (un / (64 * mtiles)) % nq, h = un / (64 * mtiles * nq);
  const int64_t eq = mt / mtw, w = mt % mtw;
  const float* lo = gate + (h * ne + mt * 16 + lane / 4) * dh + q * kChunkK + 8 * (lane % 4) + 4 * u;
  const float* hi = lo + 8 * dh;
  const float v[8] = {lo[0], lo[1], hi[0], hi[1], lo[2], lo[3], hi[2], hi[3]};
  store_split_units(v, out, [&](int s) { return (((((h * nq + q) * mtw + w) * kSplits + s) * 4 + eq) * 2 + u) * 32 + lane; });
}

// The fp32 logits [64 tokens][ne] of block (blockIdx.x, head h) into sc (row
// stride ld): 8 warps = 2 token groups x 4 expert quarters, each warp 32 tokens
// x ne / 4 experts over the whole d_head (kWarp; kFiltered's route_logits_t
// gives the same bits).
__device__ __forceinline__ void route_logits_mma(const uint16_t* __restrict__ r, int64_t ldr,
                                                 const uint4* __restrict__ split, int64_t t, int ne, int64_t dh,
                                                 float* sc, int ld) {
  const int h = blockIdx.y;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRtTokens;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, quad = lane & 3;
  const int tg = warp >> 2, eq = warp & 3;
  const int ntiles = ne / 8, ntw = ne / 32;  // n-tiles per head and per warp
  const int64_t nq = dh / kChunkK;
  float acc[2][kMaxTilesPerWarp][4] = {};
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  for (int64_t q = 0; q < nq; ++q) {
    uint4 a[4];  // rows g, g + 8 of m-tiles 0 and 1 of the warp's token group
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t n = n0 + tg * 32 + (i >> 1) * 16 + g + (i & 1) * 8;
      a[i] = n < t ? __ldg(reinterpret_cast<const uint4*>(r + n * ldr + h * dh + q * kChunkK + 8 * quad)) : zero;
    }
    const uint4* bq = split + ((h * nq + q) * kSplits) * ntiles * 32;
#pragma unroll
    for (int nt = 0; nt < kMaxTilesPerWarp; ++nt) {
      if (nt >= ntw) break;
      // A chunk's three split terms on a zeroed tensor-core accumulator, then one
      // IEEE add into the running sum: the tensor core's truncating alignment only
      // ever sees a 32-term partial sum, not the whole dot product.
      float part[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int s = 0; s < kSplits; ++s) {
        const uint4 b = __ldg(bq + (s * ntiles + eq * ntw + nt) * 32 + lane);
        mma_chunk(part[0], a[0], a[1], b);
        mma_chunk(part[1], a[2], a[3], b);
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[mt][nt][c] += part[mt][c];
    }
  }
  // C fragment: c0, c1 row g, columns 2 quad + {0, 1}; c2, c3 row g + 8.
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kMaxTilesPerWarp; ++nt) {
      if (nt >= ntw) break;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int tok = tg * 32 + mt * 16 + g + (c >> 1) * 8, e = (eq * ntw + nt) * 8 + 2 * quad + (c & 1);
        sc[tok * ld + e] = acc[mt][nt][c];
      }
    }
}

// RouteSelect::kWarp. Grid (ceil(T / 64), MH). Shared memory: the scores
// [64][E + 4] and the head's bias [E]. Every score gets the exact sigmoid, then
// a warp per token runs route_select over all E experts.
__global__ void __launch_bounds__(kRtWarps * 32, 2)
    moe_route_mma_kernel(const uint16_t* __restrict__ r, int64_t ldr, const uint4* __restrict__ split,
                         const float* __restrict__ bias, int32_t* __restrict__ idx_out, float* __restrict__ w_out,
                         const int32_t* __restrict__ forced, float* __restrict__ margin, int64_t t, int ne, int k,
                         int64_t dh, float route_scale, bool normalize) {
  extern __shared__ float smem[];
  const int ld = score_ld(ne);
  float* sc = smem;
  float* bs = sc + kRtTokens * ld;
  __shared__ int order[kRtWarps][kMaxTopK + 1];
  __shared__ uint64_t exp_table[32];
  exp2_table_to_shared(exp_table);
  const int h = blockIdx.y;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRtTokens;
  for (int e = threadIdx.x; e < ne; e += blockDim.x) bs[e] = bias[h * ne + e];
  const int warp = threadIdx.x >> 5;
  route_logits_mma(r, ldr, split, t, ne, dh, sc, ld);
  __syncthreads();
  for (int tok = 0; tok < kRtTokens; ++tok)
    for (int e = threadIdx.x; e < ne; e += blockDim.x) sc[tok * ld + e] = sigmoid_f32(sc[tok * ld + e], exp_table);
  __syncthreads();
  for (int tok = warp; tok < kRtTokens; tok += kRtWarps) {
    const int64_t n = n0 + tok;
    if (n >= t) break;
    route_select(sc + tok * ld, bs, ne, k, order[warp], static_cast<int64_t>(h) * t + n, forced, margin, idx_out,
                 w_out, route_scale, normalize);
  }
}

// ---- RouteSelect::kFiltered: the filter -----------------------------------------
//
// The warp selection spends most of the kernel's instructions on the exact
// (glibc) sigmoid of all E scores and a sort plus k + 1 butterfly picks per
// row, while a row's top k + 1 is decided by few experts. These rank exactly
// only a superset of the top k + 1:
//  A. The fast sigmoid a (sigmoid_fast_f32) and A = a + bias of every score,
//     and the max of A over each of 32 disjoint groups of the row's experts.
//     The (k+1)-th largest tau of the 32 group maxima (a sort and two shuffle
//     merges) has k + 1 distinct experts at A >= tau, so the exact score
//     S = sigmoid_f32 + bias of the row's (k+1)-th pick is >= tau - eps
//     wherever |A - S| <= eps, and every expert of the exact top k + 1 has
//     A >= tau - 2 eps.
//  B. The candidates A >= tau - 3 eps (NaN always) go to the row's list in
//     shared memory (a shared atomic counter: the list order varies, the
//     ranks below do not).
//  C. 8 lanes per row: the exact sigmoid and score of each candidate, its rank
//     among the candidates under route_select's order (ranks_before: a strict
//     total order, so the ranks are the positions), and the reference's
//     margin, forced ids, L1 sum in slot order and weights (rank_candidates).
// Rows with more than kCandCap candidates (massive ties, non-finite biases)
// take the exact sigmoid in place and route_select, as kWarp. Outputs are the
// bytes of kWarp for the same logits; only the set ranked exactly differs.
// A and B run on the logits in registers (moe_route_filtered_t_kernel, below).
//
// eps: |a - sigmoid_f32| <= 5.3e-7 (__expf: 2 + 1.173 |z| ulp, which the
// sigmoid's slope s (1 - s) <= 0.25 and s (1 - s) |z| <= 0.23 scale to 9e-8;
// 1 + E and glibc's expf 6e-8 each; __fdividef 2 ulp 2.4e-7; the exact
// division 6e-8), and the two fp32 adds of the bias round by 2^-24 |A| each,
// |A| <= M = 1 + max |bias|. kEpsAbs + M kEpsRel is ~8x that; the fp32
// rounding of tau - 3 eps is < 2^-23 M, inside the margin.

constexpr int kCandCap = 32;     // candidates per row ranked exactly (4 per lane of 8)
constexpr int kMaxFastTake = 8;  // k + 1 <= 8: the group maxima merge keeps the top 8
constexpr float kEpsAbs = 4e-6f;
constexpr float kEpsRel = 0x1p-19f;
constexpr unsigned kFull = 0xffffffffu;

/// kFiltered's static shared memory (the scores and the bias are dynamic).
struct FilterShared {
  uint64_t exp_table[32];
  int cnt[kRtTokens];                    // candidates per row (past kCandCap: the row falls back)
  uint8_t cand[kRtTokens][kCandCap];     // their expert ids, in no particular order
  int pick_id[kRtTokens][kMaxFastTake];  // a row's first k + 1 in rank order
  float pick_s[kRtTokens][kMaxFastTake], pick_v[kRtTokens][kMaxFastTake];
  int order[kRtWarps][kMaxFastTake];     // route_select's scratch for the fallback rows
  float bias_max[kRtWarps];              // max |bias| of each warp's share (NaN dropped)
};

/// Copies the head's bias to `bs` and its warp maxima of |bias| to fs.bias_max,
/// zeroes the candidate counts; the caller synchronises before the reads.
__device__ __forceinline__ void filter_prologue(FilterShared& fs, const float* __restrict__ bias, float* bs, int ne) {
  exp2_table_to_shared(fs.exp_table);
  float babs = 0.f;  // fmaxf drops NaN biases: their experts are always candidates
  for (int e = threadIdx.x; e < ne; e += blockDim.x) {
    bs[e] = bias[blockIdx.y * ne + e];
    babs = fmaxf(babs, fabsf(bs[e]));
  }
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) babs = fmaxf(babs, __shfl_xor_sync(kFull, babs, off));
  if ((threadIdx.x & 31) == 0) fs.bias_max[threadIdx.x >> 5] = babs;
  if (threadIdx.x < kRtTokens) fs.cnt[threadIdx.x] = 0;
}

/// eps for the head (see above): inf for an infinite bias, when every expert passes.
__device__ __forceinline__ float filter_eps(const FilterShared& fs) {
  float m_bias = 0.f;
#pragma unroll
  for (int w = 0; w < kRtWarps; ++w) m_bias = fmaxf(m_bias, fs.bias_max[w]);
  return kEpsAbs + (1.0f + m_bias) * kEpsRel;
}

__device__ __forceinline__ void cs_desc(float& a, float& b) {
  const float hi = fmaxf(a, b), lo = fminf(a, b);
  a = hi, b = lo;
}

/// The 8 largest of the 32 group maxima of a row (lanes l, l ^ 8, l ^ 16, l ^ 24
/// hold 8 each, NaN-free), sorted descending, in all four lanes.
__device__ __forceinline__ void top8_of_row(float m[8]) {
  cs_desc(m[0], m[1]); cs_desc(m[2], m[3]); cs_desc(m[4], m[5]); cs_desc(m[6], m[7]);
  cs_desc(m[0], m[2]); cs_desc(m[1], m[3]); cs_desc(m[4], m[6]); cs_desc(m[5], m[7]);
  cs_desc(m[1], m[2]); cs_desc(m[5], m[6]);
  cs_desc(m[0], m[4]); cs_desc(m[1], m[5]); cs_desc(m[2], m[6]); cs_desc(m[3], m[7]);
  cs_desc(m[2], m[4]); cs_desc(m[3], m[5]);
  cs_desc(m[1], m[2]); cs_desc(m[3], m[4]); cs_desc(m[5], m[6]);
#pragma unroll
  for (int mask = 8; mask <= 16; mask *= 2) {
    // max(mine[j], partner's[7 - j]) is the top 8 of both lists as a bitonic
    // sequence; three half-cleaner stages sort it.
    float p[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) p[j] = __shfl_xor_sync(kFull, m[7 - j], mask);
#pragma unroll
    for (int j = 0; j < 8; ++j) m[j] = fmaxf(m[j], p[j]);
#pragma unroll
    for (int d = 4; d >= 1; d /= 2)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if ((j & d) == 0) cs_desc(m[j], m[j + d]);
  }
}

/// The threshold tau - 3 eps of a row from its sorted top 8 group maxima.
/// NaN (tau = inf, eps = inf) or -inf: every expert passes and the row falls back.
__device__ __forceinline__ float filter_threshold(const float m[8], int take, float eps) {
  float tau = m[0];
#pragma unroll
  for (int j = 1; j < kMaxFastTake; ++j) tau = j == take - 1 ? m[j] : tau;
  return tau - 3.0f * eps;
}

/// route_select's order as one unsigned comparison: ranks_before(va, a, vb, b)
/// iff rank_key(va, a) > rank_key(vb, b) for experts a, b < 256. The high word
/// orders the scores (NaN highest, -0 as +0 since they compare equal), the low
/// word puts lower ids first among equal scores. 0 (no finite key) marks an
/// empty slot, which ranks after everything.
__device__ __forceinline__ uint64_t rank_key(float v, int id) {
  uint32_t u = __float_as_uint(v);
  u = u == 0x80000000u ? 0u : u;
  const uint32_t ord = (u & 0x7fffffffu) > 0x7f800000u ? 0xffffffffu : (u & 0x80000000u) ? ~u : u | 0x80000000u;
  return (static_cast<uint64_t>(ord) << 32) | static_cast<uint32_t>(255 - id);
}

/// crank[m] += the number of the row's candidates (8 lanes from gbase, slots
/// 0 .. kSlots - 1 each) whose key exceeds key[m]; slots from kSlots on must be
/// empty in the whole warp.
template <int kSlots>
__device__ __forceinline__ void count_ranks(const uint64_t key[4], int crank[4], int gbase) {
#pragma unroll
  for (int m2 = 0; m2 < kSlots; ++m2)
#pragma unroll
    for (int l = 0; l < 8; ++l) {
      const uint64_t ok = __shfl_sync(kFull, key[m2], gbase | l);  // 0 for an empty slot: never counts
#pragma unroll
      for (int m = 0; m < kSlots; ++m) crank[m] += ok > key[m] ? 1 : 0;
    }
}

/// Part C for the block's rows (all threads; the candidate lists complete and
/// synchronised): 8 lanes per row, rows pass * 32 + warp * 4 + lane / 8.
/// `sc` holds the raw logits (row stride ld); the fallback rows' turn into
/// exact sigmoids in place.
__device__ __forceinline__ void rank_candidates(FilterShared& fs, float* sc, int ld, const float* bs, int64_t t,
                                                int ne, int k, const int32_t* __restrict__ forced,
                                                float* __restrict__ margin, int32_t* __restrict__ idx_out,
                                                float* __restrict__ w_out, float route_scale, bool normalize) {
  const int h = blockIdx.y;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRtTokens;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int take = k + 1;
  const int l8 = lane & 7, gbase = lane & ~7;
  for (int pass = 0; pass < kRtTokens / 32; ++pass) {
    const int row = pass * 32 + warp * 4 + (lane >> 3);
    const int64_t n = n0 + row;
    const bool valid = n < t;
    const int count = valid ? fs.cnt[row] : 0;
    const bool over = count > kCandCap;
    const int nc = over ? 0 : count;
    const float* x = sc + row * ld;
    int cid[4], crank[4];
    float cs[4], cv[4];
    uint64_t key[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      cid[m] = -1, crank[m] = 0, cs[m] = 0.f, cv[m] = 0.f, key[m] = 0u;
      if (l8 + 8 * m < nc) {
        cid[m] = fs.cand[row][l8 + 8 * m];
        cs[m] = sigmoid_f32(x[cid[m]], fs.exp_table);
        cv[m] = cs[m] + bs[cid[m]];  // route_pick's v = s[e] + bs[e]
        key[m] = rank_key(cv[m], cid[m]);
      }
    }
    // Rows mostly have 7 to 16 candidates: the slots past the warp's largest list are empty.
    const int nmax = __reduce_max_sync(kFull, nc);
    if (nmax <= 8)
      count_ranks<1>(key, crank, gbase);
    else if (nmax <= 16)
      count_ranks<2>(key, crank, gbase);
    else
      count_ranks<4>(key, crank, gbase);
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      if (cid[m] >= 0 && crank[m] < take) {
        fs.pick_id[row][crank[m]] = cid[m];
        fs.pick_s[row][crank[m]] = cs[m];
        fs.pick_v[row][crank[m]] = cv[m];
      }
    }
    __syncwarp();
    // route_select's epilogue with slot j = l8: the same fp32 operations in the same order.
    const bool act = valid && !over && l8 < k;
    const int64_t mi = static_cast<int64_t>(h) * t + n, base = mi * k;
    float sv = 0.f;
    if (act) {
      int e = fs.pick_id[row][l8];
      sv = fs.pick_s[row][l8];
      if (forced != nullptr) {
        e = forced[base + l8];
        e = e < 0 ? 0 : (e > ne - 1 ? ne - 1 : e);
        sv = sigmoid_f32(x[e], fs.exp_table);
      }
      idx_out[base + l8] = e;
    }
    float l1 = 0.f;
    for (int j = 0; j < k; ++j) l1 += fabsf(__shfl_sync(kFull, sv, gbase | j));
    if (act) {
      const float denom = normalize ? ((l1 < 1e-12f) ? 1e-12f : l1) : 1.0f;
      const float pn = normalize ? sv / denom : sv;
      w_out[base + l8] = pn * route_scale;
    }
    if (valid && !over && l8 == 0 && margin != nullptr) margin[mi] = fs.pick_v[row][k - 1] - fs.pick_v[row][k];
    // The rows past kCandCap: exact sigmoid in place (no other warp reads them) and route_select.
    unsigned fall = __ballot_sync(kFull, valid && over && l8 == 0);
    while (fall != 0u) {
      const int frow = pass * 32 + warp * 4 + ((__ffs(fall) - 1) >> 3);
      fall &= fall - 1u;
      float* fsc = sc + frow * ld;
      for (int e = lane; e < ne; e += 32) fsc[e] = sigmoid_f32(fsc[e], fs.exp_table);
      __syncwarp();
      route_select(fsc, bs, ne, k, fs.order[warp], static_cast<int64_t>(h) * t + n0 + frow, forced, margin, idx_out,
                   w_out, route_scale, normalize);
    }
  }
}

// ---- RouteSelect::kFiltered: the kernel -------------------------------------------
//
// The filter above, built to issue few instructions (a kernel that ran A and
// B over the logits in shared memory, 4 threads per row, spent ~60% of its
// instructions on 4 register moves per mma and ~30% on part A's loads,
// subnormal fix-ups and per-expert branches; measured slower on the H200 and
// removed):
//  - logits^T = gate_h r_h^T: the gate split (gate_split_t_kernel) is the A
//    operand, stored in its register order, and r the B operand, whose two
//    registers per mma step are adjacent words of one 16-byte load, so loads
//    feed mma.sync directly. Every logit is the same 16 products per mma step
//    (the same k permutation), the same six steps per chunk on a zeroed
//    accumulator and the same fp32 adds as route_logits_mma: the same bits.
//  - E a template argument (64, 128, 192, 256; other widths run kWarp): no
//    per-tile branches.
//  - A on the accumulators: lane (g, c) of warp (tg, eq) holds 8 tokens x
//    2 E / 64 experts, its experts of a token one of the row's 32 groups
//    (the warp's quarter eq, g: {E/4 eq + 16 mt + g + 8 j}); the group maxima
//    go through shared memory to 4 threads per row for tau, and each lane
//    tests its own values against its rows' thresholds.
//  - the bound's sigmoid is sigmoid_fast_f32, now the .ftz SFU form (the same
//    bits as before, 4 instructions instead of ~13).

constexpr int kGmLd = 36;  // group maxima row stride: the lanes' stores hit 32 banks

// The gate's path to the tensor cores. A warp's A fragments are one 16-byte
// load a lane per mma step, and ptxas, at the 128 registers of two blocks an
// SM, issues each load just before its mma: straight from global memory the
// logits loop waited on ~190 dependent L1/L2 round trips a warp (Nsight
// Compute, H200: 78 % of the kernel's stall samples on the loop's mma, long
// scoreboard 12.2 per instruction, L2 20 % busy). So thread 0 streams the
// head's split gate through a ring of kGateRing stages in shared memory with
// bulk copies (one stage: a chunk's 3 split terms of one m-tile of every
// expert quarter), and the warps read their fragments from there. The ring
// lives where the scores go once the logits are done. H200, 272p: 0.743 ->
// 0.561 ms (bench_moe 29872); also staging the block's r rows in shared
// memory gained nothing (0.564 ms; twenty-ninth session, docs/perf.md).
constexpr int kGateRing = 5;
constexpr int kGateStageBytes = kSplits * 4 * 2 * 32 * 16;  // 12 KB
constexpr int kGateRingBytes = kGateRing * kGateStageBytes;

/// Stage `i` of the head's split gate into its slot of `ring` (thread 0
/// only): waits for the slot (stage i - kGateRing released), arms it and issues
/// one bulk copy.
__device__ __forceinline__ void gate_stage_issue(StageRing<kGateRing>& gr, uint4* ring, const uint4* head_split, int i) {
  uint64_t* full = gr.acquire(i, kGateStageBytes);
  bulk_copy_g2s(ring + (i % kGateRing) * (kGateStageBytes / 16),
                head_split + static_cast<int64_t>(i) * (kGateStageBytes / 16), kGateStageBytes, full);
}

/// The fp32 logits of block (blockIdx.x, head blockIdx.y) in registers: warp
/// (tg, eq) = (warp / 4, warp % 4) holds tokens 32 tg + [0, 32) (n-tiles nt of 8)
/// x experts E/4 eq + [0, E/4) (m-tiles mt of 16) over the whole d_head;
/// acc[mt][nt][c] is expert E/4 eq + 16 mt + g + 8 (c / 2), token
/// 32 tg + 8 nt + 2 (lane % 4) + c % 2 (the C fragment, g = lane / 4).
/// The A fragments come through the gate ring (`ring`, `gr`; initialised and
/// synchronised by the caller), the B fragments (r) straight from global memory.
template <int NE>
__device__ __forceinline__ void route_logits_t(const uint16_t* __restrict__ r, int64_t ldr,
                                               const uint4* __restrict__ split, int64_t t, int64_t dh,
                                               float (&acc)[NE / 64][4][4], StageRing<kGateRing>& gr, uint4* ring) {
  constexpr int kMtw = NE / 64;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, cq = lane & 3;
  const int tg = warp >> 2, eq = warp & 3;
  // The lane's tokens tok0 + 8 nt; rows past T load row T - 1 instead (no
  // predicates): their logits are never output.
  const int64_t tok0 = static_cast<int64_t>(blockIdx.x) * kRtTokens + tg * 32 + g;
  const int64_t row0 = tok0 < t ? tok0 : t - 1;
  int off[4];  // row offsets from row0, in elements
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) off[nt] = static_cast<int>(((tok0 + 8 * nt < t ? tok0 + 8 * nt : t - 1) - row0) * ldr);
  const uint16_t* rq = r + row0 * ldr + static_cast<int64_t>(blockIdx.y) * dh + 8 * cq;
  const int64_t nq = dh / kChunkK;
  const int stages = static_cast<int>(nq) * kMtw;
  // Every chunk's r into L2 at once (the 4 lanes of a token: one 128-byte line
  // each), so that only the first chunk waits for DRAM.
  if (64 * cq < dh)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) asm volatile("prefetch.global.L2 [%0];" ::"l"(rq + off[nt] + 56 * cq));
  const uint4* head_split = split + static_cast<int64_t>(blockIdx.y) * stages * (kGateStageBytes / 16);
  if (threadIdx.x == 0)
    for (int i = 0; i < kGateRing - 1 && i < stages; ++i) gate_stage_issue(gr, ring, head_split, i);
#pragma unroll
  for (int mt = 0; mt < kMtw; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][nt][c] = 0.f;
  for (int64_t q = 0; q < nq; ++q, rq += kChunkK) {
    uint4 b[4];  // mma step u: b0, b1 = words 2u, 2u + 1
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) b[nt] = __ldg(reinterpret_cast<const uint4*>(rq + off[nt]));
#pragma unroll
    for (int mt = 0; mt < kMtw; ++mt) {
      const int i = static_cast<int>(q) * kMtw + mt;
      // Refill the slot of stage i - 1 (every warp is past it, or at most one stage behind) with stage
      // i + kGateRing - 1.
      const int next = i + kGateRing - 1;
      if (threadIdx.x == 0 && next < stages) gate_stage_issue(gr, ring, head_split, next);
      gr.wait(i);
      __syncwarp();  // the stage's reads stay after the wait (its asm has no memory clobber)
      // stage i: unit ((s 4 + eq) 2 + u) 32 + lane
      const uint4* st = ring + (i % kGateRing) * (kGateStageBytes / 16) + eq * 64 + lane;
      // As route_logits_mma: a chunk's three split terms on a zeroed accumulator,
      // then one IEEE add into the running sum.
      float part[4][4] = {};
#pragma unroll
      for (int s = 0; s < kSplits; ++s) {
        const uint4 a0 = st[s * 256], a1 = st[s * 256 + 32];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_bf16_16816(part[nt], a0.x, a0.y, a0.z, a0.w, b[nt].x, b[nt].y);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_bf16_16816(part[nt], a1.x, a1.y, a1.z, a1.w, b[nt].z, b[nt].w);
      }
      __syncwarp();  // the warp's reads of the stage are done (the arrive releases them)
      gr.release(i, lane == 0);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[mt][nt][c] += part[nt][c];
    }
  }
}

/// kFiltered's dynamic shared memory in floats: the scores (part C and the
/// fallback rows) or, before them, the gate ring; then the head's bias.
__host__ __device__ constexpr int filtered_bias_offset(int ne) {
  return kRtTokens * score_ld(ne) > kGateRingBytes / 4 ? kRtTokens * score_ld(ne) : kGateRingBytes / 4;
}
size_t route_filtered_shared(int ne) { return (static_cast<size_t>(filtered_bias_offset(ne)) + ne) * 4; }

// Grid (ceil(T / 64), MH), 256 threads; dynamic shared memory
// route_filtered_shared(NE).
template <int NE>
__global__ void __launch_bounds__(kRtWarps * 32, 2)
    moe_route_filtered_t_kernel(const uint16_t* __restrict__ r, int64_t ldr, const uint4* __restrict__ split,
                                const float* __restrict__ bias, int32_t* __restrict__ idx_out,
                                float* __restrict__ w_out, const int32_t* __restrict__ forced,
                                float* __restrict__ margin, int64_t t, int k, int64_t dh, float route_scale,
                                bool normalize) {
  constexpr int kMtw = NE / 64, ld = score_ld(NE);
  extern __shared__ __align__(128) float smem_rt[];
  float* sc = smem_rt;
  float* bs = smem_rt + filtered_bias_offset(NE);
  __shared__ FilterShared fs;
  __shared__ __align__(16) float gmax[kRtTokens][kGmLd];  // [row][eq * 8 + g]
  __shared__ __align__(16) float thr_s[kRtTokens];
  __shared__ StageRing<kGateRing> gr;
  if (threadIdx.x == 0) {
    gr.init(kRtWarps);
    fence_mbarrier_init();  // visible to the bulk copies
  }
  filter_prologue(fs, bias, bs, NE);
  __syncthreads();  // the ring's barriers
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRtTokens;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, cq = lane & 3;
  const int tg = warp >> 2, eq = warp & 3;
  float acc[kMtw][4][4];
  route_logits_t<NE>(r, ldr, split, t, dh, acc, gr, reinterpret_cast<uint4*>(smem_rt));
  __syncthreads();  // bs; the ring's last reads before the scores overwrite it

  // A: the raw logits to sc, A = a + bias in place of them, the lane's group maxima per token.
  {
    float bl[kMtw][2];
#pragma unroll
    for (int mt = 0; mt < kMtw; ++mt)
#pragma unroll
      for (int j = 0; j < 2; ++j) bl[mt][j] = bs[NE / 4 * eq + 16 * mt + g + 8 * j];
    float gm[4][2];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) gm[nt][0] = gm[nt][1] = -INFINITY;
#pragma unroll
    for (int mt = 0; mt < kMtw; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int tok = 32 * tg + 8 * nt + 2 * cq + (c & 1), e = NE / 4 * eq + 16 * mt + g + 8 * (c >> 1);
          const float x = acc[mt][nt][c];
          sc[tok * ld + e] = x;
          acc[mt][nt][c] = sigmoid_fast_f32(x) + bl[mt][c >> 1];
          gm[nt][c & 1] = fmaxf(gm[nt][c & 1], acc[mt][nt][c]);
        }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) gmax[32 * tg + 8 * nt + 2 * cq + j][8 * eq + g] = gm[nt][j];
  }
  __syncthreads();
  // tau: thread (row, q) = (warp * 8 + lane % 8, lane / 8) merges the row's group maxima 8q .. 8q + 7.
  {
    const int row = warp * 8 + (lane & 7), q = lane >> 3;
    const float4 u = *reinterpret_cast<const float4*>(&gmax[row][8 * q]);
    const float4 v = *reinterpret_cast<const float4*>(&gmax[row][8 * q + 4]);
    float m[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
    top8_of_row(m);
    const float thr = filter_threshold(m, k + 1, filter_eps(fs));
    if (q == 0) thr_s[row] = thr;
  }
  __syncthreads();
  // B: the lane's values at or above their row's threshold, as bits (16 a word:
  // token pair j = 2 (nt % 2) + c % 2, expert 2 mt + c / 2), then appended.
  {
    uint32_t bits[2] = {0u, 0u};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int tok = 32 * tg + 8 * nt + 2 * cq;
      const float2 th = *reinterpret_cast<const float2*>(&thr_s[tok]);
      const bool in0 = n0 + tok < t, in1 = n0 + tok + 1 < t;
#pragma unroll
      for (int mt = 0; mt < kMtw; ++mt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const bool pass = (c & 1) ? in1 && !(acc[mt][nt][c] < th.y) : in0 && !(acc[mt][nt][c] < th.x);
          if (pass) bits[nt >> 1] |= 1u << ((2 * (nt & 1) + (c & 1)) * 8 + 2 * mt + (c >> 1));
        }
    }
#pragma unroll
    for (int w = 0; w < 2; ++w)
      while (bits[w] != 0u) {
        const int bit = __ffs(bits[w]) - 1;
        bits[w] &= bits[w] - 1u;
        const int j = bit >> 3, i = bit & 7;
        const int tok = 32 * tg + 8 * (2 * w + (j >> 1)) + 2 * cq + (j & 1);
        const int e = NE / 4 * eq + 16 * (i >> 1) + g + 8 * (i & 1);
        const int slot = atomicAdd(&fs.cnt[tok], 1);
        if (slot < kCandCap) fs.cand[tok][slot] = static_cast<uint8_t>(e);
      }
  }
  __syncthreads();
  rank_candidates(fs, sc, ld, bs, t, NE, k, forced, margin, idx_out, w_out, route_scale, normalize);
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data());
}

using RouteKernelT = void (*)(const uint16_t*, int64_t, const uint4*, const float*, int32_t*, float*,
                              const int32_t*, float*, int64_t, int, int64_t, float, bool);

/// kFiltered's kernel for E experts per head, or nullptr for the widths it does not take.
RouteKernelT filtered_t_kernel(int ne) {
  switch (ne) {
    case 64: return moe_route_filtered_t_kernel<64>;
    case 128: return moe_route_filtered_t_kernel<128>;
    case 192: return moe_route_filtered_t_kernel<192>;
    case 256: return moe_route_filtered_t_kernel<256>;
    default: return nullptr;
  }
}

}  // namespace

bool moe_route_fused(const MoeRouteParams& p, SplitScratch& scratch, cudaStream_t s, RouteSelect select) {
  const int mh = p.num_heads, ne = p.num_experts, k = p.top_k;
  const int64_t t = p.r.size(0), dh = p.r.size(1) / mh;
  const bool aligned = (reinterpret_cast<uintptr_t>(p.r.data()) & 15u) == 0 && p.r.row_stride() % 8 == 0;
  if (dh % kChunkK != 0 || ne % 32 != 0 || ne > kMaxExperts || k > kMaxTopK || !aligned) return false;
  if (t == 0) return true;
  // The selection: kFiltered runs kWarp's for widths it has no kernel for and past top-7.
  const RouteKernelT tkernel =
      select == RouteSelect::kFiltered && k + 1 <= kMaxFastTake ? filtered_t_kernel(ne) : nullptr;
  // Both split layouts hold the same units (3 x 16 bytes per 8 gate values).
  const int64_t units = static_cast<int64_t>(mh) * (dh / kChunkK) * (ne / 8) * 32;
  auto* split = static_cast<uint4*>(scratch.get(static_cast<size_t>(units) * kSplits * sizeof(uint4), s,
                                                "moe_route (fused)"));
  const int64_t split_blocks = (units + 255) / 256;
  MAGI2_CHECK(split_blocks < (int64_t{1} << 31), "moe_route (fused): gate too large (", units, " units)");
  (tkernel != nullptr ? gate_split_t_kernel : gate_split_kernel)<<<static_cast<unsigned>(split_blocks), 256, 0, s>>>(
      ptr<const float>(p.gate), mh, ne, dh, split);
  MAGI2_CUDA_CHECK_LAUNCH("moe_route gate split");
  const size_t shared = route_fused_shared(kMaxExperts);
  static const bool opted_in = [shared] {  // not a stream operation: fine during graph capture
    MAGI2_CUDA_CHECK(cudaFuncSetAttribute(moe_route_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(shared)));
    for (const int ne : {64, 128, 192, 256})
      MAGI2_CUDA_CHECK(cudaFuncSetAttribute(filtered_t_kernel(ne), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(route_filtered_shared(ne))));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>((t + kRtTokens - 1) / kRtTokens), static_cast<unsigned>(mh));
  MAGI2_CHECK((t + kRtTokens - 1) / kRtTokens < (int64_t{1} << 31), "moe_route (fused): too many tokens (", t, ")");
  const uint16_t* r = ptr<const uint16_t>(p.r);
  const int32_t* forced = p.forced_idx.defined() ? ptr<const int32_t>(p.forced_idx) : nullptr;
  float* margin = p.margin.defined() ? ptr<float>(p.margin) : nullptr;
  if (tkernel != nullptr) {
    tkernel<<<grid, kRtWarps * 32, route_filtered_shared(ne), s>>>(r, p.r.row_stride(), split, ptr<const float>(p.bias),
                                                                 ptr<int32_t>(p.idx), ptr<float>(p.weight), forced,
                                                                 margin, t, k, dh, p.route_scale, p.normalize);
  } else {
    moe_route_mma_kernel<<<grid, kRtWarps * 32, route_fused_shared(ne), s>>>(
        r, p.r.row_stride(), split, ptr<const float>(p.bias), ptr<int32_t>(p.idx), ptr<float>(p.weight), forced,
        margin, t, ne, k, dh, p.route_scale, p.normalize);
  }
  MAGI2_CUDA_CHECK_LAUNCH("moe_route (fused)");
  return true;
}

}  // namespace magi2::cuda
