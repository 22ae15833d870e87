// The wide fused mHC logits kernel (MhcLogitsKernel::kWide, fused_kernels.h;
// spec magi2-dit.md §9.2): the ring kernel's fp32 operations in the same order
// per logit (mhc_fused.cu; same bytes), laid out so that each bf16x3 weight
// unit read from L2 serves twice the tokens.
//
// The ring kernel's 64-token blocks read the whole split weight (12,288 x 24
// x 3 bf16 = 1.77 MB) per 1.5 MB of state: the SMs took more bytes from L2
// than from DRAM, and each chunk's weight loads sat exposed before its MMAs.
// Here a block takes 128 tokens (8 m-tiles) with 24 warps: warp (class c,
// n-tile nt) runs the chunks q = c (mod 8) of n-tile nt for all 128 tokens,
// so a lane loads 3 weight units a chunk (not 9) and its accumulators are 32
// registers (not 48). The 3 warps of a class share their chunk of the state
// through a cp.async ring in shared memory ([slot][class][row][lane], 64 KB a
// slot, 3 slots: two chunks ahead, 128 KB of state an SM in flight), each
// copying a third of the rows; a named barrier per class (96 threads) makes
// the copies visible and frees the slot that the next copy refills. The
// warps' partial logits and sums of squares meet in shared memory as in the
// ring kernel: per class (the ring kernel's warp) in class order.
#include <cstdint>

#include "cuda/cp_async.cuh"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/mhc_logits_wide.h"
#include "cuda/mma_split.cuh"

namespace magi2::cuda {

namespace {

using namespace dev;

constexpr int kLogits = 24;
constexpr int kLogitTiles = kLogits / 8;  // n-tiles of mma.m16n8k16
constexpr int kClasses = 8;               // chunk classes (the ring kernel's warps)
constexpr int kWideTokens = 128;          // 8 m-tiles a block
constexpr int kMTiles = kWideTokens / 16;
constexpr int kWideRows = kWideTokens / 8;                 // rows a lane: token g + 8 i
constexpr int kWideThreads = kClasses * kLogitTiles * 32;  // 24 warps
constexpr int kWideStages = 3;
constexpr int kOwnRows = (kWideRows + kLogitTiles - 1) / kLogitTiles;  // rows i = nt + 3 j a warp copies and squares
constexpr int kSlotUnits = kClasses * kWideRows * 32;                  // uint4 a slot
constexpr size_t kWideShared = static_cast<size_t>(kWideStages) * kSlotUnits * sizeof(uint4);
static_assert((kClasses * kWideTokens * kLogits + kClasses * kWideTokens) * sizeof(float) <= kWideShared,
              "the epilogue's partials fit the ring");

// The 96 threads of chunk class `cls` (barrier 0 is __syncthreads').
__device__ __forceinline__ void class_sync(int cls) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + cls), "n"(kLogitTiles * 32) : "memory");
}

// ss += x^2 over the 8 values of one 16-byte load (the lane's share of a row's sum of squares).
__device__ __forceinline__ void add_squares(float& ss, const uint4& a) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float v = bf16_at(a, j);
    ss += v * v;
  }
}

__global__ void __launch_bounds__(kWideThreads, 1)
    mhc_logits_wide_kernel(const uint16_t* __restrict__ state, int64_t lds, const uint4* __restrict__ split,
                           float* __restrict__ logits, int64_t ldl, int64_t vw, int4 cu, int groups, float eps,
                           int64_t t) {
  extern __shared__ uint4 ring[];  // [slot][class][row i][lane]: conflict-free 16-byte accesses per warp
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, quad = lane & 3;
  const int cls = warp % kClasses, nt = warp / kClasses;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kWideTokens;
  const int nq = static_cast<int>(vw / kChunkK);
  const int nw = cls < nq ? (nq - 1 - cls) / kClasses + 1 : 0;  // chunks of this class: q = cls + 8 n
  unsigned live = 0;                                            // bit i: row i of this lane is a token
#pragma unroll
  for (int i = 0; i < kWideRows; ++i)
    if (r0 + g + 8 * i < t) live |= 1u << i;
  const int64_t r_last = (r0 + kWideTokens < t ? r0 + kWideTokens : t) - 1;
  const int m_first = group_of(cu, groups, r0), m_last = group_of(cu, groups, r_last);
  float acc[kMTiles][4] = {};
  float ss[kOwnRows] = {};  // rows nt + 3 j
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  const uint16_t* row0 = state + (r0 + g) * lds + 8 * quad;  // row i of the lane: row0 + i * row_step
  const int64_t row_step = 8 * lds;
  uint4* mine = ring + cls * kWideRows * 32 + lane;  // slot k, row i: mine[k * kSlotUnits + i * 32]
  // Chunk n of this class into slot n % kStages, this warp's third of the rows
  // (rows past the end are not copied: never read), then one commit group per call.
  auto issue = [&](int n) {
    if (n < nw) {
      const int64_t col = static_cast<int64_t>(cls + n * kClasses) * kChunkK;
      uint4* slot = mine + (n % kWideStages) * kSlotUnits;
#pragma unroll
      for (int j = 0; j < kOwnRows; ++j) {
        const int i = nt + kLogitTiles * j;
        if (i < kWideRows && ((live >> i) & 1u)) cp_async16(slot + i * 32, row0 + i * row_step + col);
      }
    }
    cp_async_commit();
  };
  for (int m = m_first; m <= m_last; ++m) {
    unsigned in_m = 0;  // bit i: row i is a token of weight group m
#pragma unroll
    for (int i = 0; i < kWideRows; ++i)
      if (((live >> i) & 1u) && group_of(cu, groups, r0 + g + 8 * i) == m) in_m |= 1u << i;
    const uint4* bm = split + static_cast<int64_t>(m) * nq * kSplits * kLogitTiles * 32 + nt * 32 + lane;
#pragma unroll 1
    for (int n = 0; n < kWideStages - 1; ++n) issue(n);
#pragma unroll 1
    for (int n = 0; n < nw; ++n) {
      const int64_t q = cls + n * kClasses;
      uint4 b[kSplits];
#pragma unroll
      for (int s = 0; s < kSplits; ++s) b[s] = __ldg(bm + (q * kSplits + s) * kLogitTiles * 32);
      cp_async_wait<kWideStages - 2>();  // this thread's copies of chunk n have landed
      class_sync(cls);                   // so have the class's; all 3 warps are done with chunk n - 1's slot
      issue(n + kWideStages - 1);        // refills that slot
      const uint4* slot = mine + (n % kWideStages) * kSlotUnits;
      if (m == m_first) {
#pragma unroll
        for (int j = 0; j < kOwnRows; ++j) {
          const int i = nt + kLogitTiles * j;
          if (i < kWideRows && ((live >> i) & 1u)) add_squares(ss[j], slot[i * 32]);
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        uint4 a[2];  // rows 2 mt (tile row g) and 2 mt + 1 (tile row g + 8)
#pragma unroll
        for (int h = 0; h < 2; ++h) a[h] = ((in_m >> (2 * mt + h)) & 1u) ? slot[(2 * mt + h) * 32] : zero;
        // The chunk's split terms on a zeroed accumulator, then one IEEE add (as the ring kernel).
        float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int s = 0; s < kSplits; ++s) mma_chunk(part, a[0], a[1], b[s]);
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[mt][c] += part[c];
      }
    }
    cp_async_wait<0>();
    class_sync(cls);  // the class is done with the ring before the next group's first copies
  }
  __syncthreads();  // every class is done with the ring before the epilogue reuses the memory
  float* part = reinterpret_cast<float*>(ring);         // [class][token][24]
  float* sq = part + kClasses * kWideTokens * kLogits;  // [class][token]
  // C fragment: c0, c1 row g, columns 2 quad + {0, 1}; c2, c3 row g + 8.
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int tok = mt * 16 + g + (c >> 1) * 8, col = nt * 8 + 2 * quad + (c & 1);
      part[(cls * kWideTokens + tok) * kLogits + col] = acc[mt][c];
    }
#pragma unroll
  for (int j = 0; j < kOwnRows; ++j) {
    const int i = nt + kLogitTiles * j;  // warp-uniform: every lane shuffles
    if (i >= kWideRows) continue;
    float v = ss[j];
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    if (quad == 0) sq[cls * kWideTokens + g + 8 * i] = v;
  }
  __syncthreads();
  // A thread per (token, logit): the classes' partials in class order, then rs = 1 / sqrt(mean x^2 + eps).
  for (int e = threadIdx.x; e < kWideTokens * kLogits; e += blockDim.x) {
    const int tok = e / kLogits, col = e % kLogits;
    const int64_t r = r0 + tok;
    if (r >= t) continue;
    float s2 = 0.f, l = 0.f;
    for (int w = 0; w < kClasses; ++w) {
      s2 += sq[w * kWideTokens + tok];
      l += part[(w * kWideTokens + tok) * kLogits + col];
    }
    const float rs = 1.0f / sqrtf(s2 * (1.0f / static_cast<float>(vw)) + eps);
    logits[r * ldl + col] = l * rs;
  }
}

}  // namespace

void launch_mhc_logits_wide(const uint16_t* state, int64_t lds, const uint4* split, float* logits, int64_t ldl,
                            int64_t vw, int4 cu, int groups, float eps, int64_t t, cudaStream_t s) {
  static const bool opted_in = [] {  // not a stream operation: fine during graph capture
    MAGI2_CUDA_CHECK(cudaFuncSetAttribute(mhc_logits_wide_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kWideShared)));
    MAGI2_CUDA_CHECK(cudaFuncSetAttribute(mhc_logits_wide_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                          static_cast<int>(cudaSharedmemCarveoutMaxShared)));
    return true;
  }();
  (void)opted_in;
  const int64_t grid = (t + kWideTokens - 1) / kWideTokens;
  MAGI2_CHECK(grid < (int64_t{1} << 31), "mhc_logits (fused, wide): too many rows for one launch (", t, ")");
  mhc_logits_wide_kernel<<<static_cast<unsigned>(grid), kWideThreads, kWideShared, s>>>(state, lds, split, logits, ldl,
                                                                                        vw, cu, groups, eps, t);
}

}  // namespace magi2::cuda
