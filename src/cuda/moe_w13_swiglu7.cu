// The fused W13 + SwiGLU7 of the routed experts (moe_w13_swiglu7.h).
//
// One CTA = one tile of <= 128 routed rows of one flat expert; 2 warpgroups,
// each 64 rows. The tile's rows are gathered from the token rows into shared
// memory once (cp.async, zero-filled past the expert's rows: 64 KB, K = 256
// in full), then the CTA walks the expert's intermediate columns in chunks of
// 64: the gate and up columns of a chunk ([256 x 64] each, MN-major as the
// checkpoint stores the banks) are double-buffered by cp.async while the
// previous chunk's wgmma and epilogue run. The epilogue rounds G and U to
// bf16 (the reference's rounding points, spec §8.3), applies SwiGLU7 on the
// SFU sigmoid and stores bf16 pairs. (Overlapping chunk j + 1's wgmmas with
// chunk j's epilogue through a second accumulator set was tried: 255
// registers with spills, and ptxas serialised the wgmmas (C7514).) Tiles are in expert order, so the CTAs
// in flight share an expert's weights through L2.
//
// Why not CUTLASS here: its grouped GEMM writes G and U (an [R, 2560] bf16
// buffer, 11 GB at 272p) and a separate pass reads them back; an epilogue
// that pairs a gate column with its up column is not an elementwise fusion.
// With both accumulators in the same registers the pairing is free.
//
// Summation: each output element is one fp32 wgmma chain over k in ascending
// 16-blocks; fixed tile shapes and no split-K, so the bytes depend neither on
// the other rows nor on the grid (token passes give the same bytes).
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include "core/error.h"
#include "cuda/block_scan.cuh"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/moe_w13_swiglu7.h"
#include "ops/numerics.h"

namespace magi2::cuda {

namespace {

constexpr int kBM = 128;   // routed rows per tile
constexpr int kBN = 64;    // intermediate columns per chunk (of the gate and of the up bank)
constexpr int kDH = 256;   // K: the MoE head width, held whole in shared memory
constexpr int kThreads = 256;  // two warpgroups
constexpr int kScanThreads = 1024;

using Bf16 = cute::bfloat16_t;
using SmemLayoutA = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Bf16>{},
                                                 cute::Shape<cute::Int<kBM>, cute::Int<kDH>>{}));
using SmemLayoutB = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<Bf16>{},
                                                 cute::Shape<cute::Int<kBN>, cute::Int<kDH>>{}));
using TiledMma = decltype(cute::make_tiled_mma(
    cute::SM90_64x64x16_F32BF16BF16_SS<cute::GMMA::Major::K, cute::GMMA::Major::MN>{},
    cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>{}));

constexpr int kElemsA = static_cast<int>(cute::cosize_v<SmemLayoutA>);
constexpr int kElemsB = static_cast<int>(cute::cosize_v<SmemLayoutB>);
// A, then the B tiles [stage][gate, up]; +1024 to align the base to the SW128 atom.
constexpr size_t kSmemBytes = static_cast<size_t>(kElemsA + 4 * kElemsB) * sizeof(Bf16) + 1024;
static_assert(kElemsA % 512 == 0 && kElemsB % 512 == 0, "tiles keep the 1024-byte alignment of the atoms");

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// cp.async writes through the generic proxy; wgmma reads through the async one.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// tile_start[f] = tiles of the experts before f; tile_start[nf] = all tiles.
__global__ void w13_tile_scan(const int32_t* __restrict__ offsets, int nf, int32_t* __restrict__ tile_start) {
  dev::block_exclusive_scan<kScanThreads>(
      nf, [offsets](int i) { return (offsets[i + 1] - offsets[i] + kBM - 1) / kBM; }, tile_start);
}

__global__ void __launch_bounds__(kThreads, 1)
    w13_swiglu7_kernel(const uint16_t* __restrict__ r, int64_t ldr, int mh, int64_t de,
                       const int32_t* __restrict__ src, const int32_t* __restrict__ offsets,
                       const int32_t* __restrict__ tile_start, int nf, const uint16_t* __restrict__ wg,
                       const uint16_t* __restrict__ wu, uint16_t* __restrict__ z, int64_t ldz) {
  using namespace cute;
  const int tile = static_cast<int>(blockIdx.x);
  if (tile >= tile_start[nf]) return;
  // The expert of this tile: the last f with tile_start[f] <= tile (it has rows,
  // since tile_start[f + 1] > tile).
  int lo = 0, hi = nf - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tile_start[mid] <= tile) lo = mid; else hi = mid - 1;
  }
  const int f = lo;
  const int64_t row0 = offsets[f] + static_cast<int64_t>(tile - tile_start[f]) * kBM;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kBM), offsets[f + 1] - row0));
  const int tid = static_cast<int>(threadIdx.x);

  extern __shared__ unsigned char smem_raw[];
  Bf16* base = reinterpret_cast<Bf16*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  auto sA = make_tensor(make_smem_ptr(base), SmemLayoutA{});  // (128, 256), K-major

  // The tile's routed rows, gathered (16 bytes a copy; rows past the expert's end are zeros).
  constexpr int kChunksA = kDH / 8;
  for (int c = tid; c < kBM * kChunksA; c += kThreads) {
    const int row = c / kChunksA, kc = c % kChunksA;
    const uint16_t* g = r;
    if (row < rows) {
      const int64_t sr = src[row0 + row];
      g = r + (sr / mh) * ldr + (sr % mh) * kDH + kc * 8;
    }
    cp_async16(&sA(row, kc * 8), g, row < rows ? 16 : 0);
  }
  const int64_t bank = static_cast<int64_t>(f) * kDH * de;
  auto load_b = [&](int j, int st) {
    auto sg = make_tensor(make_smem_ptr(base + kElemsA + (2 * st) * kElemsB), SmemLayoutB{});
    auto su = make_tensor(make_smem_ptr(base + kElemsA + (2 * st + 1) * kElemsB), SmemLayoutB{});
    const uint16_t* g0 = wg + bank + static_cast<int64_t>(j) * kBN;
    const uint16_t* u0 = wu + bank + static_cast<int64_t>(j) * kBN;
    constexpr int kChunksB = kBN / 8;
    for (int c = tid; c < kDH * kChunksB; c += kThreads) {
      const int k = c / kChunksB, nc = c % kChunksB;
      cp_async16(&sg(nc * 8, k), g0 + k * de + nc * 8, 16);
      cp_async16(&su(nc * 8, k), u0 + k * de + nc * 8, 16);
    }
  };
  load_b(0, 0);
  cp_async_commit();

  TiledMma mma;
  auto thr = mma.get_thread_slice(tid);
  auto tCrA = thr.make_fragment_A(thr.partition_A(sA));  // descriptors (MMA, MMA_M, MMA_K)
  auto coord = thr.partition_C(make_identity_tensor(cute::Shape<Int<kBM>, Int<kBN>>{}));
  auto stage_b = [&](int st, int part) {
    return make_tensor(make_smem_ptr(base + kElemsA + (2 * st + part) * kElemsB), SmemLayoutB{});
  };
  // Issues chunk j's G and U wgmmas (stage j & 1) into (ag, au); the caller commits and waits.
  auto issue = [&](int j, auto& ag, auto& au) {
    auto tCrG = thr.make_fragment_B(thr.partition_B(stage_b(j & 1, 0)));
    auto tCrU = thr.make_fragment_B(thr.partition_B(stage_b(j & 1, 1)));
    warpgroup_fence_operand(ag);
    warpgroup_fence_operand(au);
    warpgroup_arrive();
    mma.accumulate_ = GMMA::ScaleOut::Zero;
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tCrA); ++kb) {
      gemm(mma, tCrA(_, _, kb), tCrG(_, _, kb), ag);
      mma.accumulate_ = GMMA::ScaleOut::One;
    }
    mma.accumulate_ = GMMA::ScaleOut::Zero;
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tCrA); ++kb) {
      gemm(mma, tCrA(_, _, kb), tCrU(_, _, kb), au);
      mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
  };
  // Z of chunk j from finished accumulators. Values 2i and 2i + 1 of the wgmma
  // accumulator are adjacent columns of one row.
  auto store = [&](int j, auto& ag, auto& au) {
    warpgroup_fence_operand(ag);
    warpgroup_fence_operand(au);
    const int64_t n0 = static_cast<int64_t>(j) * kBN;
    CUTE_UNROLL
    for (int i = 0; i < size(ag); i += 2) {
      const int m = get<0>(coord(i)), n = get<1>(coord(i));
      if (m < rows) {
        auto sig = [](float x) { return dev::sigmoid_fast_f32(x); };
        const float z0 = swiglu7_f32(dev::round_bf16(ag(i)), dev::round_bf16(au(i)), sig);
        const float z1 = swiglu7_f32(dev::round_bf16(ag(i + 1)), dev::round_bf16(au(i + 1)), sig);
        const uint32_t packed =
            static_cast<uint32_t>(dev::f32_to_bf16(z0)) | (static_cast<uint32_t>(dev::f32_to_bf16(z1)) << 16);
        *reinterpret_cast<uint32_t*>(z + (row0 + m) * ldz + n0 + n) = packed;
      }
    }
  };
  auto acc_g = partition_fragment_C(mma, cute::Shape<Int<kBM>, Int<kBN>>{});
  auto acc_u = partition_fragment_C(mma, cute::Shape<Int<kBM>, Int<kBN>>{});
  const int chunks = static_cast<int>(de / kBN);

  // Chunk j + 1 loads while chunk j's wgmmas and epilogue run.
  for (int j = 0; j < chunks; ++j) {
    if (j + 1 < chunks) {
      load_b(j + 1, (j + 1) & 1);  // that stage's last reader (chunk j - 1) finished before the loop's end barrier
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    fence_proxy_async();
    __syncthreads();
    issue(j, acc_g, acc_u);
    warpgroup_wait<0>();
    store(j, acc_g, acc_u);
    __syncthreads();  // every warpgroup is done with stage j & 1 before chunk j + 2 is loaded into it
  }
}

}  // namespace

bool moe_w13_swiglu7_supported(int64_t dh, int64_t de) { return dh == kDH && de > 0 && de % kBN == 0; }

void moe_w13_swiglu7(const W13Swiglu7Args& a, cudaStream_t s) {
  MAGI2_CHECK(moe_w13_swiglu7_supported(a.dh, a.de), "moe_w13_swiglu7: needs d_head ", kDH,
              " and d_expert a multiple of ", kBN, " (got ", a.dh, ", ", a.de, ")");
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  MAGI2_CHECK(aligned(a.r) && aligned(a.w_gate) && aligned(a.w_up) && aligned(a.z) && a.ldr % 8 == 0 &&
                  a.ldz % 8 == 0 && a.ldz >= a.de && a.mh >= 1 && a.nf >= 1,
              "moe_w13_swiglu7: rows, banks and output must be 16-byte aligned with strides that are multiples of 8");
  if (a.max_rows <= 0) return;
  static const bool attr = [] {
    MAGI2_CUDA_CHECK(cudaFuncSetAttribute(w13_swiglu7_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kSmemBytes)));
    return true;
  }();
  (void)attr;
  w13_tile_scan<<<1, kScanThreads, 0, s>>>(a.offsets, a.nf, a.tile_start);
  MAGI2_CUDA_CHECK_LAUNCH("moe_w13_swiglu7 tile scan");
  // Tiles <= sum over experts of (rows / 128 + 1): the grid's upper bound, no host sync.
  const int64_t grid = (a.max_rows + kBM - 1) / kBM + a.nf;
  MAGI2_CHECK(grid < (int64_t{1} << 31), "moe_w13_swiglu7: too many rows for one launch (", a.max_rows, ")");
  w13_swiglu7_kernel<<<static_cast<unsigned>(grid), kThreads, kSmemBytes, s>>>(a.r, a.ldr, a.mh, a.de, a.src, a.offsets,
                                                                  a.tile_start, a.nf, a.w_gate, a.w_up, a.z, a.ldz);
  MAGI2_CUDA_CHECK_LAUNCH("moe_w13_swiglu7");
}

}  // namespace magi2::cuda
