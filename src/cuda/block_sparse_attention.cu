// Block-sparse (range-list) attention on the CUDA backend: the refiner's
// block-window attention (ops.h BlockSparseAttentionParams; docs/refiner.md §5).
//
// Planning (host, once per pair list): the pairs are grouped by q range with
// the CPU op's checks (ops/block_ranges.h); each group's k ranges are sorted
// and touching ranges merged (the same union of keys), and its q range is cut
// into 64-query tiles. Tiles {q0, q1, first range, end range} and ranges go to
// the device once and are cached for the process, keyed by the pair list's
// contents, so later calls (and CUDA graph capture) enqueue one kernel and
// read nothing on the host. A pair list first seen during capture is an Error
// (run one eager forward first), as for the cuDNN plans.
//
// Kernel: FlashAttention-2 style on the bf16 tensor cores (mma.m16n8k16, fp32
// accumulate). One block of 4 warps per (64-query tile, q head), 16 query rows
// per warp held as A fragments; key tiles of 64 rows of K and V (the head's
// kv head, GQA) staged in padded shared memory, walked range by range in
// ascending order. Online softmax per row in fp32 (exp2 with the scale folded
// in), P rounded to bf16 for the P V product (the FlashAttention/FFA
// rounding point; the CPU op keeps P in fp32: docs/cuda.md has the bound),
// one bf16 rounding of o = acc / l. Fixed reduction order, no atomics:
// deterministic. Rows no pair covers are zeroed (a memset, only when some are).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "cuda/attn_ops.h"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "ops/block_ranges.h"

namespace magi2::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileQ = 16 * kWarps;  // queries per block
constexpr int kTileK = 64;           // keys per shared-memory tile
constexpr int kPad = 8;              // bf16 of row padding: conflict-free fragment loads

/// A device plan of one pair list.
struct SparsePlan {
  int4* tiles = nullptr;   ///< [ntiles] {q0, q1, range begin, range end}
  int2* ranges = nullptr;  ///< [nranges] merged k ranges {k0, k1}
  int64_t ntiles = 0;
  bool all_rows_covered = false;
  ~SparsePlan() {
    if (tiles) cudaFree(tiles);  // errors ignored: may run at process exit
    if (ranges) cudaFree(ranges);
  }
};

using PlanKey = std::tuple<uint64_t, int64_t, int64_t>;  // contents hash, pairs, tokens

struct PlanCache {
  std::mutex mu;
  std::map<PlanKey, std::unique_ptr<SparsePlan>> plans;
};

PlanCache& cache() {
  static PlanCache* c = new PlanCache();  // never destroyed: no CUDA calls during static destruction
  return *c;
}

uint64_t hash_pairs(const Tensor& q, const Tensor& k) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over 64-bit words of both lists
  for (const Tensor* t : {&q, &k}) {
    const uint32_t* w = t->data_as<uint32_t>();
    const int64_t n = t->numel();
    for (int64_t i = 0; i + 1 < n; i += 2) h = (h ^ (uint64_t(w[i]) | (uint64_t(w[i + 1]) << 32))) * 1099511628211ull;
    if (n % 2) h = (h ^ w[n - 1]) * 1099511628211ull;
  }
  return h;
}

std::unique_ptr<SparsePlan> build_plan(const Tensor& qr, const Tensor& kr, int64_t t) {
  const std::vector<BlockSparseGroup> groups = group_block_sparse_pairs(qr, kr, t);
  std::vector<int4> tiles;
  std::vector<int2> ranges;
  int64_t covered = 0;
  for (const auto& [q, ks] : groups) {
    std::vector<TokenRange> sorted = ks;
    std::sort(sorted.begin(), sorted.end(), [](TokenRange a, TokenRange b) { return a.begin < b.begin; });
    const int r0 = static_cast<int>(ranges.size());
    for (const TokenRange& r : sorted) {
      if (!ranges.empty() && static_cast<int>(ranges.size()) > r0 && ranges.back().y == r.begin)
        ranges.back().y = r.end;
      else
        ranges.push_back(make_int2(r.begin, r.end));
    }
    const int r1 = static_cast<int>(ranges.size());
    for (int32_t q0 = q.begin; q0 < q.end; q0 += kTileQ) tiles.push_back(make_int4(q0, std::min(q.end, q0 + kTileQ), r0, r1));
    covered += q.end - q.begin;
  }
  auto plan = std::make_unique<SparsePlan>();
  plan->ntiles = static_cast<int64_t>(tiles.size());
  plan->all_rows_covered = covered == t;
  MAGI2_CUDA_CHECK(cudaMalloc(&plan->tiles, std::max<size_t>(16, tiles.size() * sizeof(int4))));
  MAGI2_CUDA_CHECK(cudaMalloc(&plan->ranges, std::max<size_t>(16, ranges.size() * sizeof(int2))));
  if (!tiles.empty())
    MAGI2_CUDA_CHECK(cudaMemcpy(plan->tiles, tiles.data(), tiles.size() * sizeof(int4), cudaMemcpyHostToDevice));
  if (!ranges.empty())
    MAGI2_CUDA_CHECK(cudaMemcpy(plan->ranges, ranges.data(), ranges.size() * sizeof(int2), cudaMemcpyHostToDevice));
  return plan;
}

/// The cached plan of this pair list, built now if new (outside capture only).
const SparsePlan& plan_for(const BlockSparseAttentionParams& p, int64_t t, cudaStream_t s) {
  // Host checks first: a bad pair list is an Error whether or not it is cached.
  MAGI2_CHECK(p.q_ranges.defined() && p.k_ranges.defined() && p.q_ranges.device() == Device::CPU &&
                  p.k_ranges.device() == Device::CPU && p.q_ranges.dtype() == DType::I32 &&
                  p.k_ranges.dtype() == DType::I32 && p.q_ranges.is_contiguous() && p.k_ranges.is_contiguous() &&
                  p.q_ranges.shape() == p.k_ranges.shape(),
              "block_sparse_attention: q_ranges and k_ranges must be host i32 [P, 2] of one shape, got ",
              shape_str(p.q_ranges.shape()), " and ", shape_str(p.k_ranges.shape()));
  const PlanKey key{hash_pairs(p.q_ranges, p.k_ranges), p.q_ranges.numel(), t};
  PlanCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.plans.find(key);
  if (it != c.plans.end()) return *it->second;
  check_not_capturing(s, "CUDA backend: block_sparse_attention: the pair list (", p.q_ranges.size(0), " pairs, ",
                      t, " tokens) was not planned before stream capture (run one eager forward of this layout first)");
  return *c.plans.emplace(key, build_plan(p.q_ranges, p.k_ranges, t)).first->second;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(dev::f32_to_bf16(lo)) | (static_cast<uint32_t>(dev::f32_to_bf16(hi)) << 16);
}

__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Rows [r0, r0 + 64) of one head (HD bf16 each, 16-byte aligned) into shared
// memory with leading dimension HD + kPad; rows at or past `end` become zeros.
template <int HD>
__device__ __forceinline__ void stage_rows(const uint16_t* __restrict__ g, int64_t row_stride, int r0, int end,
                                           uint16_t* __restrict__ dst) {
  constexpr int kVec = HD / 8;  // uint4 per row
  for (int e = threadIdx.x; e < kTileK * kVec; e += kThreads) {
    const int r = e / kVec, c = (e % kVec) * 8;
    uint4 w = make_uint4(0, 0, 0, 0);
    if (r0 + r < end) w = *reinterpret_cast<const uint4*>(g + static_cast<int64_t>(r0 + r) * row_stride + c);
    *reinterpret_cast<uint4*>(dst + r * (HD + kPad) + c) = w;
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads)
    block_sparse_kernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                        uint16_t* __restrict__ o, const int4* __restrict__ tiles, const int2* __restrict__ ranges,
                        int hq, int hk, float scale_log2) {
  constexpr int kLd = HD + kPad, kSteps = HD / 16, kDimTiles = HD / 8, kKeyTiles = kTileK / 8;
  __shared__ __align__(16) uint16_t ks[kTileK * kLd];
  __shared__ __align__(16) uint16_t vs[kTileK * kLd];

  const int4 tile = tiles[blockIdx.x];
  const int head = blockIdx.y, kv_head = head / (hq / hk);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int64_t qs = static_cast<int64_t>(hq) * HD, kvs = static_cast<int64_t>(hk) * HD;  // token strides
  const int row_a = tile.x + warp * 16 + g, row_b = row_a + 8;  // this lane's two query rows

  // Q fragments (A, row-major 16 x HD): a0 row g cols 2c.., a1 row g+8, a2/a3 cols 2c+8...
  uint32_t qa[kSteps][4];
  {
    const uint16_t* pa = q + static_cast<int64_t>(row_a) * qs + static_cast<int64_t>(head) * HD;
    const uint16_t* pb = q + static_cast<int64_t>(row_b) * qs + static_cast<int64_t>(head) * HD;
    const bool va = row_a < tile.y, vb = row_b < tile.y;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int col = 16 * s + 2 * c;
      qa[s][0] = va ? *reinterpret_cast<const uint32_t*>(pa + col) : 0u;
      qa[s][1] = vb ? *reinterpret_cast<const uint32_t*>(pb + col) : 0u;
      qa[s][2] = va ? *reinterpret_cast<const uint32_t*>(pa + col + 8) : 0u;
      qa[s][3] = vb ? *reinterpret_cast<const uint32_t*>(pb + col + 8) : 0u;
    }
  }

  float acc[kDimTiles][4];
#pragma unroll
  for (int n = 0; n < kDimTiles; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;  // running max (log2 units) and partial sums

  const uint16_t* kbase = k + static_cast<int64_t>(kv_head) * HD;
  const uint16_t* vbase = v + static_cast<int64_t>(kv_head) * HD;
  for (int r = tile.z; r < tile.w; ++r) {
    const int2 range = ranges[r];
    for (int k0 = range.x; k0 < range.y; k0 += kTileK) {
      __syncthreads();  // the previous tile is consumed
      stage_rows<HD>(kbase, kvs, k0, range.y, ks);
      stage_rows<HD>(vbase, kvs, k0, range.y, vs);
      __syncthreads();

      // S = Q K^T for 64 keys: B (col-major k16 x n8) = K rows, b0 dims 2c.., b1 dims 2c+8...
      float sc[kKeyTiles][4];
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
        sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
        const uint16_t* krow = ks + (8 * n + g) * kLd;
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
          const uint32_t b0 = *reinterpret_cast<const uint32_t*>(krow + 16 * s + 2 * c);
          const uint32_t b1 = *reinterpret_cast<const uint32_t*>(krow + 16 * s + 2 * c + 8);
          mma16816(sc[n], qa[s], b0, b1);
        }
      }
      // Online softmax (log2 domain); keys at or past the range end are -inf.
      float tmax_a = -INFINITY, tmax_b = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
        const int key = k0 + 8 * n + 2 * c;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const bool valid = key + e < range.y;
          sc[n][e] = valid ? sc[n][e] * scale_log2 : -INFINITY;
          sc[n][2 + e] = valid ? sc[n][2 + e] * scale_log2 : -INFINITY;
          tmax_a = fmaxf(tmax_a, sc[n][e]);
          tmax_b = fmaxf(tmax_b, sc[n][2 + e]);
        }
      }
      // The 4 lanes of a row (same g) meet through a fixed xor tree.
      tmax_a = fmaxf(tmax_a, __shfl_xor_sync(0xffffffffu, tmax_a, 1));
      tmax_a = fmaxf(tmax_a, __shfl_xor_sync(0xffffffffu, tmax_a, 2));
      tmax_b = fmaxf(tmax_b, __shfl_xor_sync(0xffffffffu, tmax_b, 1));
      tmax_b = fmaxf(tmax_b, __shfl_xor_sync(0xffffffffu, tmax_b, 2));
      const float mn_a = fmaxf(m_a, tmax_a), mn_b = fmaxf(m_b, tmax_b);  // finite: each tile has a valid key
      const float al_a = exp2f(m_a - mn_a), al_b = exp2f(m_b - mn_b);
      m_a = mn_a;
      m_b = mn_b;
      l_a *= al_a;
      l_b *= al_b;
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
        acc[n][0] *= al_a;
        acc[n][1] *= al_a;
        acc[n][2] *= al_b;
        acc[n][3] *= al_b;
      }
      uint32_t pa[kKeyTiles][2];  // P as bf16 pairs: [key tile][row a, row b]
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
        const float p0 = exp2f(sc[n][0] - mn_a), p1 = exp2f(sc[n][1] - mn_a);
        const float p2 = exp2f(sc[n][2] - mn_b), p3 = exp2f(sc[n][3] - mn_b);
        l_a += p0 + p1;
        l_b += p2 + p3;
        pa[n][0] = pack_bf16(p0, p1);
        pa[n][1] = pack_bf16(p2, p3);
      }
      // O += P V: A = P (16 x 64 keys, k-steps of 16 keys), B (k = key, n = dim) from V rows.
#pragma unroll
      for (int s = 0; s < kTileK / 16; ++s) {
        const uint32_t a[4] = {pa[2 * s][0], pa[2 * s][1], pa[2 * s + 1][0], pa[2 * s + 1][1]};
        const uint16_t* v0 = vs + (16 * s + 2 * c) * kLd;
#pragma unroll
        for (int n = 0; n < kDimTiles; ++n) {
          const int col = 8 * n + g;
          const uint32_t b0 = static_cast<uint32_t>(v0[col]) | (static_cast<uint32_t>(v0[kLd + col]) << 16);
          const uint32_t b1 =
              static_cast<uint32_t>(v0[8 * kLd + col]) | (static_cast<uint32_t>(v0[9 * kLd + col]) << 16);
          mma16816(acc[n], a, b0, b1);
        }
      }
    }
  }
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  if (tile.z == tile.w) return;  // no keys (cannot happen: groups hold at least one non-empty range)
  const float inv_a = 1.f / l_a, inv_b = 1.f / l_b;
  uint16_t* oa = o + static_cast<int64_t>(row_a) * qs + static_cast<int64_t>(head) * HD;
  uint16_t* ob = o + static_cast<int64_t>(row_b) * qs + static_cast<int64_t>(head) * HD;
#pragma unroll
  for (int n = 0; n < kDimTiles; ++n) {
    const int col = 8 * n + 2 * c;
    if (row_a < tile.y) *reinterpret_cast<uint32_t*>(oa + col) = pack_bf16(acc[n][0] * inv_a, acc[n][1] * inv_a);
    if (row_b < tile.y) *reinterpret_cast<uint32_t*>(ob + col) = pack_bf16(acc[n][2] * inv_b, acc[n][3] * inv_b);
  }
}

template <int HD>
void launch(const BlockSparseAttentionParams& p, const SparsePlan& plan, cudaStream_t s) {
  const int hq = static_cast<int>(p.q.size(1)), hk = static_cast<int>(p.k.size(1));
  const float scale_log2 = static_cast<float>(static_cast<double>(p.scale) * 1.4426950408889634);
  const dim3 grid(static_cast<unsigned>(plan.ntiles), static_cast<unsigned>(hq));
  block_sparse_kernel<HD><<<grid, kThreads, 0, s>>>(p.q.data_as<uint16_t>(), p.k.data_as<uint16_t>(),
                                                     p.v.data_as<uint16_t>(), p.o.data_as<uint16_t>(), plan.tiles,
                                                     plan.ranges, hq, hk, scale_log2);
  MAGI2_CUDA_CHECK_LAUNCH("block_sparse_attention");
}

}  // namespace

void block_sparse_attention(const BlockSparseAttentionParams& p, cudaStream_t s) {
  for (const Tensor* x : {&p.q, &p.k, &p.v, &p.o})
    MAGI2_CHECK(x->defined() && x->dim() == 3 && x->is_contiguous() && x->dtype() == DType::BF16 &&
                    x->device() == Device::CUDA && reinterpret_cast<uintptr_t>(x->data()) % 16 == 0,
                "block_sparse_attention: q, k, v, o must be contiguous 16-byte aligned bf16 CUDA tensors [T, H, hd]");
  const int64_t t = p.q.size(0), hq = p.q.size(1), hd = p.q.size(2), hk = p.k.size(1);
  MAGI2_CHECK(p.o.shape() == p.q.shape(), "block_sparse_attention: o ", shape_str(p.o.shape()), " must match q ",
              shape_str(p.q.shape()));
  MAGI2_CHECK(p.k.shape() == p.v.shape() && p.k.size(0) == t && p.k.size(2) == hd && hk > 0 && hq % hk == 0,
              "block_sparse_attention: k/v ", shape_str(p.k.shape()), " do not fit q ", shape_str(p.q.shape()),
              " (same tokens and head dim, q heads a multiple of kv heads)");
  MAGI2_CHECK(hd == 32 || hd == 64 || hd == 128, "CUDA backend: block_sparse_attention takes head dim 32, 64 or 128, "
              "got ", hd);
  MAGI2_CHECK(hq <= 65535, "block_sparse_attention: more than 65535 heads");
  const SparsePlan& plan = plan_for(p, t, s);
  if (!plan.all_rows_covered) MAGI2_CUDA_CHECK(cudaMemsetAsync(p.o.data(), 0, p.o.nbytes(), s));
  if (plan.ntiles == 0 || hq == 0) return;
  MAGI2_CHECK(plan.ntiles < (int64_t{1} << 31), "block_sparse_attention: too many query tiles");
  if (hd == 32)
    launch<32>(p, plan, s);
  else if (hd == 64)
    launch<64>(p, plan, s);
  else
    launch<128>(p, plan, s);
}

}  // namespace magi2::cuda
