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

// The fp32 logits [64 tokens][ne] of block (blockIdx.x, head h) into sc (row
// stride ld): 8 warps = 2 token groups x 4 expert quarters, each warp 32 tokens
// x ne / 4 experts over the whole d_head. Both selections call this, so their
// logits are the same bits.
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

// ---- RouteSelect::kFiltered ----------------------------------------------------
//
// The warp selection spends most of the kernel's instructions on the exact
// (glibc) sigmoid of all E scores and a sort plus k + 1 butterfly picks per
// row, while a row's top k + 1 is decided by few experts. This one ranks
// exactly only a superset of the top k + 1:
//  A. 4 threads per row, each over E / 4 experts (e = 4 i + q, conflict-free
//     with the stride E + 4): the fast sigmoid a (sigmoid_fast_f32) and
//     A = a + bias, kept in registers, and the max of A over each of 8 groups.
//     The (k+1)-th largest tau of the row's 32 group maxima (a sort and two
//     shuffle merges) has k + 1 distinct experts at A >= tau, so the exact
//     score S = sigmoid_f32 + bias of the row's (k+1)-th pick is >= tau - eps
//     wherever |A - S| <= eps, and every expert of the exact top k + 1 has
//     A >= tau - 2 eps.
//  B. The candidates A >= tau - 3 eps (NaN always) go to the row's list in
//     shared memory (a shared atomic counter: the list order varies, the
//     ranks below do not).
//  C. 8 lanes per row: the exact sigmoid and score of each candidate, its rank
//     among the candidates under route_select's order (ranks_before: a strict
//     total order, so the ranks are the positions), and the reference's
//     margin, forced ids, L1 sum in slot order and weights.
// Rows with more than kCandCap candidates (massive ties, non-finite biases)
// take the exact sigmoid in place and route_select, as kWarp. Outputs are the
// bytes of kWarp for the same logits; only the set ranked exactly differs.
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

// Grid (ceil(T / 64), MH), 256 threads; shared memory as moe_route_mma_kernel.
__global__ void __launch_bounds__(kRtWarps * 32, 2)
    moe_route_filtered_kernel(const uint16_t* __restrict__ r, int64_t ldr, const uint4* __restrict__ split,
                              const float* __restrict__ bias, int32_t* __restrict__ idx_out,
                              float* __restrict__ w_out, const int32_t* __restrict__ forced,
                              float* __restrict__ margin, int64_t t, int ne, int k, int64_t dh, float route_scale,
                              bool normalize) {
  extern __shared__ float smem[];
  const int ld = score_ld(ne);
  float* sc = smem;
  float* bs = sc + kRtTokens * ld;
  __shared__ uint64_t exp_table[32];
  __shared__ int cnt[kRtTokens];
  __shared__ uint8_t cand[kRtTokens][kCandCap];
  __shared__ int pick_id[kRtTokens][kMaxFastTake];
  __shared__ float pick_s[kRtTokens][kMaxFastTake], pick_v[kRtTokens][kMaxFastTake];
  __shared__ int order[kRtWarps][kMaxFastTake];  // route_select's scratch for the fallback rows
  __shared__ float bias_max[kRtWarps];
  exp2_table_to_shared(exp_table);
  const int h = blockIdx.y;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRtTokens;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float babs = 0.f;  // fmaxf drops NaN biases: their experts are always candidates
  for (int e = threadIdx.x; e < ne; e += blockDim.x) {
    bs[e] = bias[h * ne + e];
    babs = fmaxf(babs, fabsf(bs[e]));
  }
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) babs = fmaxf(babs, __shfl_xor_sync(kFull, babs, off));
  if (lane == 0) bias_max[warp] = babs;
  if (threadIdx.x < kRtTokens) cnt[threadIdx.x] = 0;
  route_logits_mma(r, ldr, split, t, ne, dh, sc, ld);
  __syncthreads();
  const int take = k + 1;  // < ne: ne >= 32 > kMaxFastTake

  // A + B: thread (row, q) = (warp * 8 + lane % 8, lane / 8).
  {
    float m_bias = 0.f;
#pragma unroll
    for (int w = 0; w < kRtWarps; ++w) m_bias = fmaxf(m_bias, bias_max[w]);
    const float eps = kEpsAbs + (1.0f + m_bias) * kEpsRel;  // inf for an infinite bias: every expert passes
    const int row = warp * 8 + (lane & 7), q = lane >> 3, nper = ne / 4;
    const float* x = sc + row * ld;
    float a[kMaxExperts / 4], gm[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) gm[j] = -INFINITY;
#pragma unroll
    for (int i = 0; i < kMaxExperts / 4; ++i) {
      if (i < nper) {
        const int e = 4 * i + q;
        a[i] = sigmoid_fast_f32(x[e]) + bs[e];
        gm[i % 8] = fmaxf(gm[i % 8], a[i]);
      }
    }
    top8_of_row(gm);
    float tau = gm[0];
#pragma unroll
    for (int j = 1; j < kMaxFastTake; ++j) tau = j == take - 1 ? gm[j] : tau;
    // NaN (tau = inf, eps = inf) or -inf: every expert passes and the row falls back.
    const float thr = tau - 3.0f * eps;
    if (n0 + row < t) {
#pragma unroll
      for (int i = 0; i < kMaxExperts / 4; ++i) {
        if (i < nper && !(a[i] < thr)) {
          const int slot = atomicAdd(&cnt[row], 1);
          if (slot < kCandCap) cand[row][slot] = static_cast<uint8_t>(4 * i + q);
        }
      }
    }
  }
  __syncthreads();

  // C: 8 lanes per row, rows pass * 32 + warp * 4 + lane / 8.
  const int l8 = lane & 7, gbase = lane & ~7;
  for (int pass = 0; pass < kRtTokens / 32; ++pass) {
    const int row = pass * 32 + warp * 4 + (lane >> 3);
    const int64_t n = n0 + row;
    const bool valid = n < t;
    const int count = valid ? cnt[row] : 0;
    const bool over = count > kCandCap;
    const int nc = over ? 0 : count;
    const float* x = sc + row * ld;
    int cid[4], crank[4];
    float cs[4], cv[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      cid[m] = -1, crank[m] = 0, cs[m] = 0.f, cv[m] = 0.f;
      if (l8 + 8 * m < nc) {
        cid[m] = cand[row][l8 + 8 * m];
        cs[m] = sigmoid_f32(x[cid[m]], exp_table);
        cv[m] = cs[m] + bs[cid[m]];  // route_pick's v = s[e] + bs[e]
      }
    }
    const int nmax = __reduce_max_sync(kFull, nc);
#pragma unroll
    for (int m2 = 0; m2 < 4; ++m2) {
      if (8 * m2 >= nmax) break;
      for (int l = 0; l < 8; ++l) {
        const float ov = __shfl_sync(kFull, cv[m2], gbase | l);
        const int oid = __shfl_sync(kFull, cid[m2], gbase | l);
#pragma unroll
        for (int m = 0; m < 4; ++m)
          if (8 * m < nmax && oid >= 0 && cid[m] >= 0 && ranks_before(ov, oid, cv[m], cid[m])) ++crank[m];
      }
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      if (cid[m] >= 0 && crank[m] < take) {
        pick_id[row][crank[m]] = cid[m];
        pick_s[row][crank[m]] = cs[m];
        pick_v[row][crank[m]] = cv[m];
      }
    }
    __syncwarp();
    // route_select's epilogue with slot j = l8: the same fp32 operations in the same order.
    const bool act = valid && !over && l8 < k;
    const int64_t mi = static_cast<int64_t>(h) * t + n, base = mi * k;
    float sv = 0.f;
    if (act) {
      int e = pick_id[row][l8];
      sv = pick_s[row][l8];
      if (forced != nullptr) {
        e = forced[base + l8];
        e = e < 0 ? 0 : (e > ne - 1 ? ne - 1 : e);
        sv = sigmoid_f32(x[e], exp_table);
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
    if (valid && !over && l8 == 0 && margin != nullptr) margin[mi] = pick_v[row][k - 1] - pick_v[row][k];
    // The rows past kCandCap: exact sigmoid in place (no other warp reads them) and route_select.
    unsigned fall = __ballot_sync(kFull, valid && over && l8 == 0);
    while (fall != 0u) {
      const int frow = pass * 32 + warp * 4 + ((__ffs(fall) - 1) >> 3);
      fall &= fall - 1u;
      float* fs = sc + frow * ld;
      for (int e = lane; e < ne; e += 32) fs[e] = sigmoid_f32(fs[e], exp_table);
      __syncwarp();
      route_select(fs, bs, ne, k, order[warp], static_cast<int64_t>(h) * t + n0 + frow, forced, margin, idx_out,
                   w_out, route_scale, normalize);
    }
  }
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data());
}

}  // namespace

bool moe_route_fused(const MoeRouteParams& p, SplitScratch& scratch, cudaStream_t s, RouteSelect select) {
  const int mh = p.num_heads, ne = p.num_experts, k = p.top_k;
  const int64_t t = p.r.size(0), dh = p.r.size(1) / mh;
  const bool aligned = (reinterpret_cast<uintptr_t>(p.r.data()) & 15u) == 0 && p.r.row_stride() % 8 == 0;
  if (dh % kChunkK != 0 || ne % 32 != 0 || ne > kMaxExperts || k > kMaxTopK || !aligned) return false;
  if (t == 0) return true;
  const int64_t units = static_cast<int64_t>(mh) * (dh / kChunkK) * (ne / 8) * 32;
  auto* split = static_cast<uint4*>(scratch.get(static_cast<size_t>(units) * kSplits * sizeof(uint4), s,
                                                "moe_route (fused)"));
  const int64_t split_blocks = (units + 255) / 256;
  MAGI2_CHECK(split_blocks < (int64_t{1} << 31), "moe_route (fused): gate too large (", units, " units)");
  gate_split_kernel<<<static_cast<unsigned>(split_blocks), 256, 0, s>>>(ptr<const float>(p.gate), mh, ne, dh, split);
  MAGI2_CUDA_CHECK_LAUNCH("moe_route gate split");
  const size_t shared = route_fused_shared(kMaxExperts);
  static const bool opted_in = [shared] {  // not a stream operation: fine during graph capture
    for (const void* f : {reinterpret_cast<const void*>(moe_route_mma_kernel),
                          reinterpret_cast<const void*>(moe_route_filtered_kernel)})
      MAGI2_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>((t + kRtTokens - 1) / kRtTokens), static_cast<unsigned>(mh));
  MAGI2_CHECK((t + kRtTokens - 1) / kRtTokens < (int64_t{1} << 31), "moe_route (fused): too many tokens (", t, ")");
  const bool filtered = select == RouteSelect::kFiltered && k + 1 <= kMaxFastTake;
  (filtered ? moe_route_filtered_kernel : moe_route_mma_kernel)<<<grid, kRtWarps * 32, route_fused_shared(ne), s>>>(
      ptr<const uint16_t>(p.r), p.r.row_stride(), split, ptr<const float>(p.bias), ptr<int32_t>(p.idx),
      ptr<float>(p.weight), p.forced_idx.defined() ? ptr<const int32_t>(p.forced_idx) : nullptr,
      p.margin.defined() ? ptr<float>(p.margin) : nullptr, t, ne, k, dh, p.route_scale, p.normalize);
  MAGI2_CUDA_CHECK_LAUNCH("moe_route (fused)");
  return true;
}

}  // namespace magi2::cuda
