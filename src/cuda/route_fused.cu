// The opt-in fused router (fused_kernels.h; spec magi2-dit.md §8.2): per
// head, the fp32 logits [T, E] = r_h [T, dh] (bf16) x gate_h^T on bf16 tensor
// cores with the gate split in three bf16 terms (mma_split.cuh), then in the
// same kernel the reference's sigmoid (glibc-exact exp), selection,
// normalisation and margin (route_select.cuh). The params were checked by
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

// Grid (ceil(T / 64), MH). Shared memory: the scores [64][E + 4] and the head's bias [E].
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
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, quad = lane & 3;
  const int tg = warp >> 2, eq = warp & 3;
  const int ntiles = ne / 8, ntw = ne / 32;  // n-tiles per head and per warp
  const int64_t nq = dh / kChunkK;
  float acc[2][kMaxTilesPerWarp][4];
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int b = 0; b < kMaxTilesPerWarp; ++b)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[a][b][c] = 0.f;
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

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data());
}

}  // namespace

bool moe_route_fused(const MoeRouteParams& p, SplitScratch& scratch, cudaStream_t s) {
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
    MAGI2_CUDA_CHECK(cudaFuncSetAttribute(moe_route_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(shared)));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>((t + kRtTokens - 1) / kRtTokens), static_cast<unsigned>(mh));
  MAGI2_CHECK((t + kRtTokens - 1) / kRtTokens < (int64_t{1} << 31), "moe_route (fused): too many tokens (", t, ")");
  moe_route_mma_kernel<<<grid, kRtWarps * 32, route_fused_shared(ne), s>>>(
      ptr<const uint16_t>(p.r), p.r.row_stride(), split, ptr<const float>(p.bias), ptr<int32_t>(p.idx),
      ptr<float>(p.weight), p.forced_idx.defined() ? ptr<const int32_t>(p.forced_idx) : nullptr,
      p.margin.defined() ? ptr<float>(p.margin) : nullptr, t, ne, k, dh, p.route_scale, p.normalize);
  MAGI2_CUDA_CHECK_LAUNCH("moe_route (fused)");
  return true;
}

}  // namespace magi2::cuda
