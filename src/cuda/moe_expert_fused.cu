// The fused routed experts (moe_expert_fused.h): W13 -> SwiGLU7 -> W2 -> x
// routing weight per tile of <= 128 routed rows of one flat expert.
//
// Shape of the work: K = 256 for W13 is only 16 wgmma k-steps, so a grouped
// GEMM's epilogue and its [R, 2560] bf16 output dominate (11 GB at 272p); here
// the intermediate lives one chunk at a time in registers, as in an attention
// forward at head dim 256 (x = Q, the W13 chunk = K, Z = P, the W2 chunk = V).
//
// CTA: three warpgroups. Warpgroup 0 is the producer: one thread streams the
// expert's weights by TMA in chunks of 32 intermediate columns (the gate and up
// columns of a chunk side by side as one [256, 64] B operand, and the chunk's
// [32, 256] rows of W_down) through two mbarrier rings. Warpgroups 1 and 2 each
// own 64 of the tile's rows: each gathers its rows into shared memory
// (cp.async, zeros past the expert's end; it waits for its own rows only),
// then per chunk j:
//   issue GU(j) = x [64, 256] . W13 chunk -> [64, 64] fp32 (gate | up);
//   issue Y += Z(j - 1) . W_down chunk j - 1 (A from registers);
//   wait for GU(j) only, then SwiGLU7 into Z(j) while W2(j - 1) runs.
// Z alternates between two register fragments, so the loop is unrolled by two.
// The C fragment of GU and the A fragment of the W2 wgmma pair element for
// element: A value q of k-step s is accumulator value 8 s + q (gate) and
// 16 + 8 s + q (up) of the same thread, so no shuffles.
//
// Bytes: every output element is one fp32 wgmma chain in ascending 16-blocks
// of k (W13 over d_head, W2 over d_expert), rounded where the grouped path
// rounds (G, U, Z and bf16(Y x w)); fixed tiles, no split-K, so the bytes
// depend neither on the other rows nor on the grid.
#include <cuda.h>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include <mutex>

#include "core/error.h"
#include "cuda/cp_async.cuh"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/moe_expert_fused.h"
#include "cuda/moe_expert_fused.cuh"
#include "cuda/tma.h"
#include "ops/backend_options.h"
#include "ops/numerics.h"

namespace magi2::cuda {

namespace {

constexpr int kBM = kExpertTileRows;  // routed rows per tile (64 per consumer warpgroup)
constexpr int kDH = 256;  // d_head: W13's K (held whole in shared memory) and W2's N
constexpr int kBC = 32;   // intermediate columns per chunk
constexpr int kStages13 = 3, kStages2 = 3;
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kConsumerThreads = 256;
constexpr int kConsumerWarps = kConsumerThreads / 32;
static_assert(24 * 128 + 240 * kConsumerThreads <= 168 * kThreads, "setmaxnreg counts fit the launch's registers");

using Bf16 = cute::bfloat16_t;
using cute::_1;
using cute::_2;
using cute::Int;
// x tile (128, 256), K-major; the W13 chunk (64 = gate 32 | up 32, 256) and the
// W_down chunk (256, 32), both MN-major as the checkpoint stores the banks, K
// blocks first so each TMA box is one contiguous run (CUTLASS's order for MN-major).
using LayoutX = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Bf16>{},
                                             cute::Shape<Int<kBM>, Int<kDH>>{}));
using LayoutW13 = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW64_Atom<Bf16>{},
                                               cute::Shape<Int<2 * kBC>, Int<kDH>>{}, cute::Step<_2, _1>{}));
using LayoutW2 = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<Bf16>{},
                                              cute::Shape<Int<kDH>, Int<kBC>>{}, cute::Step<_2, _1>{}));
using MmaGU = decltype(cute::make_tiled_mma(
    cute::SM90_64x64x16_F32BF16BF16_SS<cute::GMMA::Major::K, cute::GMMA::Major::MN>{},
    cute::Layout<cute::Shape<_2, _1, _1>>{}));
using MmaW2 = decltype(cute::make_tiled_mma(
    cute::SM90_64x256x16_F32BF16BF16_RS<cute::GMMA::Major::K, cute::GMMA::Major::MN>{},
    cute::Layout<cute::Shape<_2, _1, _1>>{}));

constexpr int kElemsX = static_cast<int>(cute::cosize_v<LayoutX>);
constexpr int kElemsW13 = static_cast<int>(cute::cosize_v<LayoutW13>);
constexpr int kElemsW2 = static_cast<int>(cute::cosize_v<LayoutW2>);
static_assert(kElemsX == kBM * kDH && kElemsW13 == 2 * kBC * kDH && kElemsW2 == kBC * kDH, "dense tiles");
constexpr uint32_t kBytesW13 = kElemsW13 * 2, kBytesW2 = kElemsW2 * 2;

struct alignas(1024) Smem {
  Bf16 x[kElemsX];
  Bf16 w13[kStages13][kElemsW13];
  Bf16 w2[kStages2][kElemsW2];
  StageRing<kStages13> ring13;
  StageRing<kStages2> ring2;
};
constexpr size_t kSmemBytes = sizeof(Smem) + 1024;  // + the base's alignment to the swizzle atoms


// The bf16 roundings use dev::bf16x2_rn (one instruction a pair): a NaN
// becomes the canonical one, which is what CUTLASS's converter in the epilogue
// path gives for the output, and a NaN in G, U or Z leaves only NaN in Y either
// way. Per element the SwiGLU7 chunk is the kernel's main non-tensor work, so
// its instruction count matters.
using dev::bf16x2_rn;
using dev::cp_async16;
__device__ __forceinline__ float bf16_lo(uint32_t p) { return __uint_as_float(p << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t p) { return __uint_as_float(p & 0xffff0000u); }

__global__ void __launch_bounds__(kThreads, 1)
    expert_fused_kernel(const __grid_constant__ CUtensorMap tm_gate, const __grid_constant__ CUtensorMap tm_up,
                        const __grid_constant__ CUtensorMap tm_down, const uint16_t* __restrict__ r, int64_t ldr,
                        int mh, int de, const int32_t* __restrict__ src, const int32_t* __restrict__ offsets,
                        const int32_t* __restrict__ tile_start, int nf, const float* __restrict__ wrow,
                        uint16_t* __restrict__ y) {
  using namespace cute;
  const int tile = static_cast<int>(blockIdx.x);
  if (tile >= tile_start[nf]) return;
  const ExpertTile t = expert_tile_of(tile, tile_start, offsets, nf);
  const int chunks = de / kBC;

  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    sm.ring13.init(kConsumerWarps);
    sm.ring2.init(kConsumerWarps);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  // Registers: the CTA holds 168 x 384 (the launch bound); the producer gives
  // back all but 24 so each consumer thread can hold 240 (Y alone is 128 fp32).
  // setmaxnreg.inc waits until the pool has them, so the two counts must fit
  // 168 x 384 = 24 x 128 + 240 x 256.
  if (tid < 128) {  // producer warpgroup: one thread issues every weight load
    cutlass::arch::warpgroup_reg_dealloc<24>();
    if (tid != 0) return;
    constexpr uint64_t kCacheHint = static_cast<uint64_t>(TMA::CacheHintSm90::EVICT_NORMAL);
    const int k0 = t.f * kDH, r0 = t.f * de;
    for (int j = 0; j < chunks; ++j) {
      const int s13 = j % kStages13, s2 = j % kStages2;
      uint64_t* full13 = sm.ring13.acquire(j, kBytesW13);
      SM90_TMA_LOAD_2D::copy(&tm_gate, full13, kCacheHint, &sm.w13[s13][0], j * kBC, k0);
      SM90_TMA_LOAD_2D::copy(&tm_up, full13, kCacheHint, &sm.w13[s13][kElemsW13 / 2], j * kBC, k0);
      uint64_t* full2 = sm.ring2.acquire(j, kBytesW2);
      for (int b = 0; b < kDH / 64; ++b)
        SM90_TMA_LOAD_2D::copy(&tm_down, full2, kCacheHint, &sm.w2[s2][b * 64 * kBC], b * 64, r0 + j * kBC);
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<240>();
  const int ct = tid - 128;  // consumer thread 0..255: warpgroup ct / 128 owns rows 64 (ct / 128) ..
  const int wg = ct / 128, wt = ct % 128;
  auto sX = make_tensor(make_smem_ptr(&sm.x[0]), LayoutX{});
  // This warpgroup's 64 rows of the tile into x (16 bytes a copy; rows past the
  // expert's end are zeros), one commit group; gathered() waits for it. Each
  // warpgroup waits only for its own rows: the other one may still be loading.
  auto gather = [&] {
    constexpr int kChunksX = kDH / 8;
    for (int c = wt; c < 64 * kChunksX; c += 128) {
      const int row = wg * 64 + c / kChunksX, kc = c % kChunksX;
      const uint16_t* g = r;
      if (row < t.rows) {
        const int64_t sr = src[t.row0 + row];
        g = r + (sr / mh) * ldr + (sr % mh) * kDH + kc * 8;
      }
      cp_async16(&sX(row, kc * 8), g, row < t.rows ? 16 : 0);
    }
    dev::cp_async_commit();
  };
  auto gathered = [&] {
    dev::cp_async_wait<0>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async wrote through the generic proxy
    cutlass::arch::NamedBarrier::sync(128, 2 + wg);                  // the warpgroup's wgmma reads every row
  };
  // A warpgroup whose 64 rows are all past the expert's end computes nothing.
  const bool idle = wg * 64 >= t.rows;
  if (!idle) gather();  // in flight while the fragments are set up

  MmaGU mma_gu;
  MmaW2 mma_w2;
  auto thr_gu = mma_gu.get_thread_slice(ct);
  auto thr_w2 = mma_w2.get_thread_slice(ct);
  auto tXrX = thr_gu.make_fragment_A(thr_gu.partition_A(sX));  // descriptors (MMA, MMA_M, MMA_K)
  auto acc_gu = partition_fragment_C(mma_gu, cute::Shape<Int<kBM>, Int<2 * kBC>>{});
  auto acc_y = partition_fragment_C(mma_w2, cute::Shape<Int<kBM>, Int<kDH>>{});
  // Z as W2's register A operand: (MMA, MMA_M, MMA_K) = ((2, 2, 2), 1, 2) bf16.
  auto z_shape = make_tensor(make_smem_ptr(&sm.x[0]),
                             make_layout(cute::Shape<Int<kBM>, Int<kBC>>{}, LayoutRight{}));
  auto z0 = thr_w2.partition_fragment_A(z_shape);
  auto z1 = thr_w2.partition_fragment_A(z_shape);
  static_assert(decltype(size(acc_gu))::value == 32 && decltype(size(z0))::value == 16, "fragment shapes");

  auto w13_stage = [&](int s) { return make_tensor(make_smem_ptr(&sm.w13[s][0]), LayoutW13{}); };
  auto w2_stage = [&](int s) { return make_tensor(make_smem_ptr(&sm.w2[s][0]), LayoutW2{}); };
  const bool signal = (ct & 31) == 0;  // one arrival per consumer warp on the empty barriers

  auto issue_gu = [&](int j, auto& acc) {
    const int s = j % kStages13;
    auto tB = thr_gu.make_fragment_B(thr_gu.partition_B(w13_stage(s)));
    warpgroup_fence_operand(acc);
    warpgroup_arrive();
    mma_gu.accumulate_ = GMMA::ScaleOut::Zero;
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tXrX); ++kb) {
      gemm(mma_gu, tXrX(_, _, kb), tB(_, _, kb), acc);
      mma_gu.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
  };
  auto issue_w2 = [&](int j, auto& z) {
    const int s = j % kStages2;
    auto tB = thr_w2.make_fragment_B(thr_w2.partition_B(w2_stage(s)));
    warpgroup_fence_operand(z);
    warpgroup_fence_operand(acc_y);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(z); ++kb) {
      mma_w2.accumulate_ = j == 0 && kb == 0 ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
      gemm(mma_w2, z(_, _, kb), tB(_, _, kb), acc_y);
    }
    warpgroup_commit_batch();
  };
  // Z of a finished GU: the gate in accumulator values 0..15, the up values in 16..31 (see the top).
  auto swiglu7_into = [&](auto& acc, auto& z) {
    warpgroup_fence_operand(acc);
    auto zw = cute::recast<uint32_t>(z);  // no repacking: the bf16x2 of cvt.rn is the register
    auto sig = [](float x) { return dev::sigmoid_fast_f32(x); };
    CUTE_UNROLL
    for (int i = 0; i < 16; i += 2) {
      const uint32_t g = bf16x2_rn(acc(i + 1), acc(i)), u = bf16x2_rn(acc(i + 17), acc(i + 16));
      const uint32_t zz = bf16x2_rn(swiglu7_f32(bf16_hi(g), bf16_hi(u), sig), swiglu7_f32(bf16_lo(g), bf16_lo(u), sig));
      zw(i / 2) = zz;  // values i and i + 1 share one register, i in the low half
    }
    warpgroup_fence_operand(z);
  };
  // One chunk: GU(j), then W2(j - 1) from the other Z, then SwiGLU7(j) while W2(j - 1) runs.
  auto step = [&](int j, auto& z_now, auto& z_prev) {
    sm.ring13.wait(j);
    if (j > 0) sm.ring2.wait(j - 1);
    issue_gu(j, acc_gu);
    if (j > 0) issue_w2(j - 1, z_prev);
    if (j > 0) {
      warpgroup_wait<1>();
    } else {
      warpgroup_wait<0>();
    }
    sm.ring13.release(j, signal);
    if (j >= 2) sm.ring2.release(j - 2, signal);  // W2(j - 2) finished before W2(j - 1)
    swiglu7_into(acc_gu, z_now);
  };

  if (idle) {
    expert_rings_idle(sm.ring13, sm.ring2, chunks, signal);
    return;
  }
  gathered();
  for (int j = 0; j < chunks; j += 2) {  // chunks is even (d_expert % 64 == 0)
    step(j, z0, z1);
    step(j + 1, z1, z0);
  }
  sm.ring2.wait(chunks - 1);
  issue_w2(chunks - 1, z1);
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc_y);

  // bf16(Y x weight); values 2i and 2i + 1 of the accumulator are adjacent columns of one row.
  auto coord = thr_w2.partition_C(make_identity_tensor(cute::Shape<Int<kBM>, Int<kDH>>{}));
  CUTE_UNROLL
  for (int i = 0; i < size(acc_y); i += 2) {
    const int m = get<0>(coord(i)), n = get<1>(coord(i));
    if (m < t.rows) {
      const float w = wrow[t.row0 + m];
      *reinterpret_cast<uint32_t*>(y + (t.row0 + m) * kDH + n) = bf16x2_rn(acc_y(i + 1) * w, acc_y(i) * w);
    }
  }
}

}  // namespace

__global__ void expert_tile_scan(const int32_t* __restrict__ offsets, int nf, int32_t* __restrict__ tile_start) {
  dev::block_exclusive_scan<kExpertScanThreads>(
      nf, [offsets](int i) { return (offsets[i + 1] - offsets[i] + kExpertTileRows - 1) / kExpertTileRows; },
      tile_start);
}

static_assert(kDH == 256 && 2 * kBC == 64, "moe_fused_expert_widths (ops/backend_options.h) states these widths");
bool moe_expert_fused_supported(int64_t dh, int64_t de) { return moe_fused_expert_widths(dh, de); }

void moe_expert_fused(const ExpertFusedArgs& a, cudaStream_t s) {
  MAGI2_CHECK(moe_expert_fused_supported(a.dh, a.de), "moe_expert_fused: needs d_head ", kDH,
              " and d_expert a multiple of ", 2 * kBC, " (got ", a.dh, ", ", a.de, ")");
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  MAGI2_CHECK(aligned(a.r) && aligned(a.w_gate) && aligned(a.w_up) && aligned(a.w_down) && aligned(a.y) &&
                  a.ldr % 8 == 0 && a.mh >= 1 && a.nf >= 1 && a.wrow != nullptr,
              "moe_expert_fused: rows, banks and output must be 16-byte aligned with row strides that are "
              "multiples of 8");
  MAGI2_CHECK(static_cast<int64_t>(a.nf) * a.de < (int64_t{1} << 31), "moe_expert_fused: the banks are too large");
  if (a.max_rows <= 0) return;
  static std::once_flag attr;
  std::call_once(attr, [] {
    MAGI2_CUDA_CHECK(cudaFuncSetAttribute(expert_fused_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kSmemBytes)));
  });
  const int64_t bank_rows = static_cast<int64_t>(a.nf) * a.dh;
  const CUtensorMap tg =
      tma_map_2d(a.w_gate, TmaElem::kBf16, bank_rows, a.de, a.de, kBC, kDH, CU_TENSOR_MAP_SWIZZLE_64B, "moe_expert_fused w_gate");
  const CUtensorMap tu =
      tma_map_2d(a.w_up, TmaElem::kBf16, bank_rows, a.de, a.de, kBC, kDH, CU_TENSOR_MAP_SWIZZLE_64B, "moe_expert_fused w_up");
  const CUtensorMap td = tma_map_2d(a.w_down, TmaElem::kBf16, static_cast<int64_t>(a.nf) * a.de, a.dh, a.dh, 64, kBC,
                                      CU_TENSOR_MAP_SWIZZLE_128B, "moe_expert_fused w_down");
  expert_tile_scan<<<1, kExpertScanThreads, 0, s>>>(a.offsets, a.nf, a.tile_start);
  MAGI2_CUDA_CHECK_LAUNCH("moe_expert_fused tile scan");
  // Tiles <= sum over experts of (rows / 128 + 1): the grid's upper bound, no host sync.
  // (A persistent grid of one CTA per SM looping over the tiles measured slower
  // on the H200: 10.1 against 8.9 ms at 272p, docs/perf.md.)
  const int64_t grid = (a.max_rows + kBM - 1) / kBM + a.nf;
  MAGI2_CHECK(grid < (int64_t{1} << 31), "moe_expert_fused: too many rows for one launch (", a.max_rows, ")");
  expert_fused_kernel<<<static_cast<unsigned>(grid), kThreads, kSmemBytes, s>>>(
      tg, tu, td, a.r, a.ldr, a.mh, static_cast<int>(a.de), a.src, a.offsets, a.tile_start, a.nf, a.wrow, a.y);
  MAGI2_CUDA_CHECK_LAUNCH("moe_expert_fused");
}

}  // namespace magi2::cuda
