// The W8A8 routed experts in one kernel (moe_expert_fused.h, docs/fp8.md):
// the bf16 fused kernel's schedule (moe_expert_fused.cu) on FP8 tensor cores.
//
// Operands, all e4m3 and K-major (FP8 wgmma reads both operands K-major):
//   x       the tile's routed rows, quantised per 1 x 128 group before the
//           kernel (moe_w8a8.cu's quantising scatter), [128, 256] in shared memory;
//   W13     per chunk of 32 intermediate columns, the gate and up columns
//           side by side, [64, 256] (rows of W_gate^T and W_up^T);
//   W_down  per chunk, W_down^T's [256, 32], its 32 columns in fp8_vt_key
//           order so the Z fragment needs no shuffle (fp8_fragment.cuh).
// G and U: the chunk's two K-blocks of d_head go to two accumulators, so each
// gets its own a_scale * w_scale (ops/numerics.h fp8_block_scale); then
// Z = SwiGLU7(G, U) in fp32, and per output column block n (128 of d_head,
// one 64 x 128 W2 wgmma each) its e4m3 with W_down's block scale folded in
// (fp8_z_factor: |Z| < 56, so no group amax), Y_n += Z_n . W_down chunk, and
// at the end y = bf16((Y_n * fp8_z_unscale(smax_n)) * routing weight).
//
// CTA: a producer warpgroup (one thread issues the TMA loads) and two consumer
// warpgroups of 64 rows each; per chunk j a consumer issues GU(j), then
// W2(j - 1) from the other Z fragment, waits for GU(j) and makes Z(j) while
// W2(j - 1) runs (the bf16 kernel's overlap). Per chunk a CTA moves ~104 KB
// through shared memory for 6.3 MFLOP, half of the bf16 kernel's bytes.
//
// Rounding: the CPU reference (cpu/moe_w8a8.cpp) has the same rounding points;
// the tensor cores sum the e4m3 products in their own order, so the two agree
// within a tolerance (tests/cuda/test_cuda_fp8_w8a8.cpp). The bytes depend on
// neither the other rows nor the grid (fixed tiles, no split-K).
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
#include "cuda/fp8_fragment.cuh"
#include "cuda/moe_expert_fused.h"
#include "cuda/moe_expert_fused.cuh"
#include "cuda/tma.h"
#include "ops/numerics.h"

namespace magi2::cuda {

namespace {

constexpr int kBM = kExpertTileRows;  // routed rows per tile (64 per consumer warpgroup)
constexpr int kDH = 256;              // d_head: W13's K (held whole in shared memory) and W2's N
constexpr int kBC = 32;               // intermediate columns per chunk: one k32 step of W2
constexpr int kNB = kDH / kFp8Block;  // W2's output column blocks (2): one 64 x 128 wgmma and one Z copy each
constexpr int kMaxKB = 64;            // d_expert / 128 at most (W_down's scales in shared memory)
constexpr int kStages = 4;
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kConsumerThreads = 256;
constexpr int kConsumerWarps = kConsumerThreads / 32;
static_assert(24 * 128 + 240 * kConsumerThreads <= 168 * kThreads, "setmaxnreg counts fit the launch's registers");

using E4m3 = cute::float_e4m3_t;
using cute::_1;
using cute::_2;
using cute::_32;
using cute::_64;
using cute::Int;
namespace GMMA = cute::SM90::GMMA;

// Every tile is made of [rows, 128 bytes] (x, W13) or [rows, 32 bytes] (W_down)
// swizzle atoms stacked along the rows, so each TMA box is one contiguous run.
using LayoutX = decltype(cute::tile_to_shape(GMMA::Layout_K_SW128_Atom<E4m3>{}, cute::Shape<Int<kBM>, Int<kDH>>{}));
using LayoutW13 =
    decltype(cute::tile_to_shape(GMMA::Layout_K_SW128_Atom<E4m3>{}, cute::Shape<Int<2 * kBC>, Int<kDH>>{}));
using LayoutW2 = decltype(cute::tile_to_shape(GMMA::Layout_K_SW32_Atom<E4m3>{},
                                              cute::Shape<Int<kFp8Block>, Int<kBC>>{}));  // one column block
using MmaGU = decltype(cute::make_tiled_mma(
    GMMA::ss_op_selector<E4m3, E4m3, float, cute::Shape<_64, Int<2 * kBC>, _32>, GMMA::Major::K, GMMA::Major::K>(),
    cute::Layout<cute::Shape<_2, _1, _1>>{}));
using MmaW2 = decltype(cute::make_tiled_mma(
    GMMA::rs_op_selector<E4m3, E4m3, float, cute::Shape<_64, Int<kFp8Block>, _32>, GMMA::Major::K,
                         GMMA::Major::K>(),
    cute::Layout<cute::Shape<_2, _1, _1>>{}));
// Z's A fragment takes G's and U's accumulator values in place: gate column c of
// the chunk is column c of GU's accumulator, up column c is column 32 + c, and
// the fragment's k order is fp8_vt_key's (the order of W_down^T's columns).
static_assert(p8_fragment_matches_vt<MmaGU, MmaW2, 2 * kBC>(), "Z's registers");

constexpr int kElemsX = static_cast<int>(cute::cosize_v<LayoutX>);
constexpr int kElemsW13 = static_cast<int>(cute::cosize_v<LayoutW13>);
constexpr int kElemsW2 = static_cast<int>(cute::cosize_v<LayoutW2>);
static_assert(kElemsX == kBM * kDH && kElemsW13 == 2 * kBC * kDH && kElemsW2 == kFp8Block * kBC, "dense tiles");
constexpr uint32_t kBytesW13 = kElemsW13, kBytesW2 = kNB * kElemsW2;
constexpr int kBoxRows13 = kBC;  // a W13 box: 32 rows (one of gate or up) x 128 bytes (one K-block)

struct alignas(1024) Smem {
  E4m3 x[kElemsX];
  E4m3 w13[kStages][kElemsW13];
  E4m3 w2[kStages][kNB][kElemsW2];
  StageRing<kStages> ring13, ring2;
  float down_scale[kMaxKB][kNB];  // W_down's block scales of the tile's expert, then Z's factors
  float unscale[kNB];
};
constexpr size_t kSmemBytes = sizeof(Smem) + 1024;  // + the base's alignment to the swizzle atoms

using dev::bf16x2_rn;
using dev::cp_async16;

struct Fp8Scales {
  const float* xs;    // [R, 2] the rows' group scales
  const float* gate;  // [nf, 2, de / 128]
  const float* up;    // [nf, 2, de / 128]
  const float* down;  // [nf, de / 128, 2]
};

__global__ void __launch_bounds__(kThreads, 1)
    expert_fused_fp8_kernel(const __grid_constant__ CUtensorMap tm_gate, const __grid_constant__ CUtensorMap tm_up,
                            const __grid_constant__ CUtensorMap tm_down, const uint8_t* __restrict__ xq, int de,
                            const int32_t* __restrict__ offsets, const int32_t* __restrict__ tile_start, int nf,
                            Fp8Scales sc, const float* __restrict__ wrow, uint16_t* __restrict__ y) {
  using namespace cute;
  const int tile = static_cast<int>(blockIdx.x);
  if (tile >= tile_start[nf]) return;
  const ExpertTile t = expert_tile_of(tile, tile_start, offsets, nf);
  const int chunks = de / kBC, kbs = de / kFp8Block;

  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    sm.ring13.init(kConsumerWarps);
    sm.ring2.init(kConsumerWarps);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (tid < 128) {  // producer warpgroup: one thread issues every weight load
    cutlass::arch::warpgroup_reg_dealloc<24>();
    if (tid != 0) return;
    constexpr uint64_t kCacheHint = static_cast<uint64_t>(TMA::CacheHintSm90::EVICT_NORMAL);
    const int r13 = t.f * de, r2 = t.f * kDH;
    for (int j = 0; j < chunks; ++j) {
      const int s = j % kStages;
      uint64_t* full13 = sm.ring13.acquire(j, kBytesW13);
      // [gate K-block 0 | up K-block 0 | gate K-block 1 | up K-block 1], 32 rows each (LayoutW13's order).
      for (int kb = 0; kb < kDH / kFp8Block; ++kb) {
        E4m3* at = &sm.w13[s][kb * 2 * kBoxRows13 * kFp8Block];
        SM90_TMA_LOAD_2D::copy(&tm_gate, full13, kCacheHint, at, kb * kFp8Block, r13 + j * kBC);
        SM90_TMA_LOAD_2D::copy(&tm_up, full13, kCacheHint, at + kBoxRows13 * kFp8Block, kb * kFp8Block,
                               r13 + j * kBC);
      }
      SM90_TMA_LOAD_2D::copy(&tm_down, sm.ring2.acquire(j, kBytesW2), kCacheHint, &sm.w2[s][0][0], j * kBC, r2);
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<240>();
  const int ct = tid - 128;  // consumer thread 0..255: warpgroup ct / 128 owns rows 64 (ct / 128) ..
  const int wg = ct / 128, wt = ct % 128;
  auto sX = make_tensor(make_smem_ptr(&sm.x[0]), LayoutX{});
  // This warpgroup's 64 rows (16 bytes a copy; rows past the expert's end are zeros).
  auto gather = [&] {
    constexpr int kChunksX = kDH / 16;
    for (int c = wt; c < 64 * kChunksX; c += 128) {
      const int row = wg * 64 + c / kChunksX, kc = c % kChunksX;
      const bool in = row < t.rows;
      const uint8_t* g = xq + (in ? (t.row0 + row) * kDH + kc * 16 : 0);
      cp_async16(&sX(row, kc * 16), g, in ? 16 : 0);
    }
    dev::cp_async_commit();
  };
  const bool idle = wg * 64 >= t.rows;
  if (!idle) gather();
  // W_down's scales of the expert: factors of Z per (K-block, column block) and the unscales.
  const float* sd = sc.down + static_cast<int64_t>(t.f) * kbs * kNB;
  for (int i = ct; i < kbs * kNB; i += kConsumerThreads) sm.down_scale[i / kNB][i % kNB] = sd[i];
  cutlass::arch::NamedBarrier::sync(kConsumerThreads, 1);
  float smax = 0.0f;
  if (ct < kNB)
    for (int b = 0; b < kbs; ++b) smax = fp8_amax_step(smax, sm.down_scale[b][ct]);
  cutlass::arch::NamedBarrier::sync(kConsumerThreads, 1);
  if (ct < kNB) {
    for (int b = 0; b < kbs; ++b) sm.down_scale[b][ct] = fp8_z_factor(sm.down_scale[b][ct], smax);
    sm.unscale[ct] = fp8_z_unscale(smax);
  }
  cutlass::arch::NamedBarrier::sync(kConsumerThreads, 1);

  MmaGU mma_gu;
  MmaW2 mma_w2;
  auto thr_gu = mma_gu.get_thread_slice(ct);
  auto thr_w2 = mma_w2.get_thread_slice(ct);
  auto tXrX = thr_gu.make_fragment_A(thr_gu.partition_A(sX));  // descriptors (MMA, MMA_M, MMA_K = 8)
  auto acc_g0 = partition_fragment_C(mma_gu, cute::Shape<Int<kBM>, Int<2 * kBC>>{});  // d_head K-block 0
  auto acc_g1 = partition_fragment_C(mma_gu, cute::Shape<Int<kBM>, Int<2 * kBC>>{});  // K-block 1
  auto acc_y0 = partition_fragment_C(mma_w2, cute::Shape<Int<kBM>, Int<kFp8Block>>{});
  auto acc_y1 = partition_fragment_C(mma_w2, cute::Shape<Int<kBM>, Int<kFp8Block>>{});
  auto z_shape = make_tensor(make_smem_ptr(&sm.x[0]), make_layout(cute::Shape<Int<kBM>, Int<kBC>>{}, LayoutRight{}));
  // Z as W2's register A operand, one copy per output column block, two chunks alternating.
  auto z00 = thr_w2.partition_fragment_A(z_shape);
  auto z01 = thr_w2.partition_fragment_A(z_shape);
  auto z10 = thr_w2.partition_fragment_A(z_shape);
  auto z11 = thr_w2.partition_fragment_A(z_shape);
  static_assert(decltype(size(acc_g0))::value == 32 && decltype(size(z00))::value == 16 &&
                    decltype(size<2>(tXrX))::value == kDH / 32,
                "fragment shapes");

  // The scales of the thread's two accumulator rows (values 0, 1 and 2, 3 of each 4).
  auto coord_gu = thr_gu.partition_C(make_identity_tensor(cute::Shape<Int<kBM>, Int<2 * kBC>>{}));
  const int m_lo = get<0>(coord_gu(0)), m_hi = get<0>(coord_gu(2));
  auto row_scales = [&](int m) {
    return m < t.rows ? *reinterpret_cast<const float2*>(sc.xs + (t.row0 + m) * 2) : make_float2(0.f, 0.f);
  };
  const float2 xs_lo = row_scales(m_lo), xs_hi = row_scales(m_hi);
  const float* sg = sc.gate + static_cast<int64_t>(t.f) * 2 * kbs;
  const float* su = sc.up + static_cast<int64_t>(t.f) * 2 * kbs;

  auto w13_stage = [&](int s) { return make_tensor(make_smem_ptr(&sm.w13[s][0]), LayoutW13{}); };
  auto w2_stage = [&](int s, int n) { return make_tensor(make_smem_ptr(&sm.w2[s][n][0]), LayoutW2{}); };
  const bool signal = (ct & 31) == 0;  // one arrival per consumer warp on the empty barriers

  auto issue_gu = [&](int j) {
    auto tB = thr_gu.make_fragment_B(thr_gu.partition_B(w13_stage(j % kStages)));
    warpgroup_fence_operand(acc_g0);
    warpgroup_fence_operand(acc_g1);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tXrX); ++kb) {
      mma_gu.accumulate_ = kb % 4 == 0 ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
      if (kb < 4)
        gemm(mma_gu, tXrX(_, _, kb), tB(_, _, kb), acc_g0);
      else
        gemm(mma_gu, tXrX(_, _, kb), tB(_, _, kb), acc_g1);
    }
    warpgroup_commit_batch();
  };
  auto issue_w2 = [&](int j, auto& z0, auto& z1) {
    const int s = j % kStages;
    auto tB0 = thr_w2.make_fragment_B(thr_w2.partition_B(w2_stage(s, 0)));
    auto tB1 = thr_w2.make_fragment_B(thr_w2.partition_B(w2_stage(s, 1)));
    warpgroup_fence_operand(z0);
    warpgroup_fence_operand(z1);
    warpgroup_fence_operand(acc_y0);
    warpgroup_fence_operand(acc_y1);
    warpgroup_arrive();
    mma_w2.accumulate_ = j == 0 ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
    gemm(mma_w2, z0(_, _, 0), tB0(_, _, 0), acc_y0);
    gemm(mma_w2, z1(_, _, 0), tB1(_, _, 0), acc_y1);
    warpgroup_commit_batch();
  };
  // Z(j) from the finished GU(j): G and U of accumulator value v (gate v < 16, up v + 16) with
  // their K-blocks' scales, SwiGLU7 (dev::swiglu7_half_tanh: one SFU op a value where swiglu7_f32
  // with sigmoid_fast_f32 takes two; the kernel 6.06 against 6.76 ms at 272p, H100, docs/perf.md),
  // then the e4m3 fragment of each column block in p8_acc_index's order.
  auto swiglu7_into = [&](int j, auto& z0, auto& z1) {
    warpgroup_fence_operand(acc_g0);
    warpgroup_fence_operand(acc_g1);
    const int nb = j * kBC / kFp8Block;  // the chunk's 128-column block of d_expert
    const float g0 = sg[nb], g1 = sg[kbs + nb], u0 = su[nb], u1 = su[kbs + nb];
    const float sgl0 = fp8_block_scale(xs_lo.x, g0), sgl1 = fp8_block_scale(xs_lo.y, g1);
    const float sgh0 = fp8_block_scale(xs_hi.x, g0), sgh1 = fp8_block_scale(xs_hi.y, g1);
    const float sul0 = fp8_block_scale(xs_lo.x, u0), sul1 = fp8_block_scale(xs_lo.y, u1);
    const float suh0 = fp8_block_scale(xs_hi.x, u0), suh1 = fp8_block_scale(xs_hi.y, u1);
    // h = G / 2 (the gate's scales halved: exact) and v = U + 1 for dev::swiglu7_half_tanh.
    const float hl0 = 0.5f * sgl0, hl1 = 0.5f * sgl1, hh0 = 0.5f * sgh0, hh1 = 0.5f * sgh1;
    float z[16];
    CUTE_UNROLL
    for (int v = 0; v < 16; ++v) {
      const bool hi = (v / 2) % 2 == 1;  // values 2, 3 of each 4 are the row r + 8
      const float h = fmaf(acc_g1(v), hi ? hh1 : hl1, acc_g0(v) * (hi ? hh0 : hl0));
      const float u1 = fmaf(acc_g1(v + 16), hi ? suh1 : sul1, fmaf(acc_g0(v + 16), hi ? suh0 : sul0, 1.0f));
      z[v] = dev::swiglu7_half_tanh(h, u1);
    }
    const float f0 = sm.down_scale[nb][0], f1 = sm.down_scale[nb][1];
    auto w0 = cute::recast<uint32_t>(z0);
    auto w1 = cute::recast<uint32_t>(z1);
    CUTE_UNROLL
    for (int q = 0; q < 4; ++q) {
      const int a = p8_acc_index(0, 4 * q), b = p8_acc_index(0, 4 * q + 1), c = p8_acc_index(0, 4 * q + 2),
                d = p8_acc_index(0, 4 * q + 3);
      w0(q) = e4m3x4_rn(z[a] * f0, z[b] * f0, z[c] * f0, z[d] * f0);
      w1(q) = e4m3x4_rn(z[a] * f1, z[b] * f1, z[c] * f1, z[d] * f1);
    }
    warpgroup_fence_operand(z0);
    warpgroup_fence_operand(z1);
  };
  // One chunk: GU(j), then W2(j - 1) from the other Z, then Z(j) while W2(j - 1) runs.
  auto step = [&](int j, auto& zn0, auto& zn1, auto& zp0, auto& zp1) {
    sm.ring13.wait(j);
    if (j > 0) sm.ring2.wait(j - 1);
    issue_gu(j);
    if (j > 0) issue_w2(j - 1, zp0, zp1);
    if (j > 0) {
      warpgroup_wait<1>();
    } else {
      warpgroup_wait<0>();
    }
    sm.ring13.release(j, signal);
    if (j >= 2) sm.ring2.release(j - 2, signal);  // W2(j - 2) finished before W2(j - 1)
    swiglu7_into(j, zn0, zn1);
  };

  if (idle) {
    expert_rings_idle(sm.ring13, sm.ring2, chunks, signal);
    return;
  }
  dev::cp_async_wait<0>();
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async wrote through the generic proxy
  cutlass::arch::NamedBarrier::sync(128, 2 + wg);                  // the warpgroup's wgmma reads every row
  for (int j = 0; j < chunks; j += 2) {  // chunks is even (d_expert % 128 == 0)
    step(j, z00, z01, z10, z11);
    step(j + 1, z10, z11, z00, z01);
  }
  sm.ring2.wait(chunks - 1);
  issue_w2(chunks - 1, z10, z11);
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc_y0);
  warpgroup_fence_operand(acc_y1);

  // bf16((Y_n x unscale_n) x weight); values 2i and 2i + 1 are adjacent columns of one row, values
  // 4i, 4i + 1 of row m_a and 4i + 2, 4i + 3 of row m_b = m_a + 8. The store goes through shared
  // memory so that a warp writes whole rows with 16-byte stores (storing the accumulators directly
  // took 64 four-byte stores a thread, 8 rows a warp instruction: Nsight Compute showed it
  // LSU-bound, docs/perf.md). The staging area is the warpgroup's own rows of sm.x (its wgmma read
  // no others and have all completed), one 64 x 128 column block at a time: 16-byte chunk c of
  // row r at piece c / 8 (LayoutX's two K-blocks), row r, position (c % 8) ^ (r % 8), so both the
  // accumulator-order writes and the row-order reads are free of bank conflicts.
  auto coord = thr_w2.partition_C(make_identity_tensor(cute::Shape<Int<kBM>, Int<kFp8Block>>{}));
  cutlass::arch::NamedBarrier::sync(128, 2 + wg);  // every warp's wgmma done reading the rows of sm.x
  // The routing weights are loaded after that barrier, so the compiler cannot hoist them into the chunk loop.
  const int m_a = get<0>(coord(0)), m_b = get<0>(coord(2));
  const float w_a = m_a < t.rows ? wrow[t.row0 + m_a] : 0.0f, w_b = m_b < t.rows ? wrow[t.row0 + m_b] : 0.0f;
  uint8_t* const stage = reinterpret_cast<uint8_t*>(&sm.x[0]) + wg * 64 * 128;
  auto chunk_at = [&](int r, int c) { return stage + (c / 8) * (kBM * 128) + r * 128 + ((c % 8) ^ (r % 8)) * 16; };
  auto store = [&](auto& acc, int n) {
    const float un = sm.unscale[n];
    CUTE_UNROLL
    for (int i = 0; i < size(acc); i += 2) {
      const int r = get<0>(coord(i)) - wg * 64, c = get<1>(coord(i));
      const float w = (i / 2) % 2 == 1 ? w_b : w_a;
      *reinterpret_cast<uint32_t*>(chunk_at(r, c / 8) + (c % 8) * 2) = bf16x2_rn(acc(i + 1) * un * w, acc(i) * un * w);
    }
    cutlass::arch::NamedBarrier::sync(128, 2 + wg);
    CUTE_UNROLL
    for (int k = 0; k < 64 * 16 / 128; ++k) {  // the block's 64 rows x 16 chunks, a warp two rows a step
      const int q = k * 128 + wt, r = q / 16, c = q % 16;
      if (wg * 64 + r < t.rows)
        *reinterpret_cast<uint4*>(y + (t.row0 + wg * 64 + r) * kDH + n * kFp8Block + c * 8) =
            *reinterpret_cast<const uint4*>(chunk_at(r, c));
    }
  };
  store(acc_y0, 0);
  cutlass::arch::NamedBarrier::sync(128, 2 + wg);  // block 0's reads done before block 1 overwrites it
  store(acc_y1, 1);
}

}  // namespace

bool moe_expert_fused_fp8_supported(int64_t dh, int64_t de) {
  return dh == kDH && de > 0 && de % kFp8Block == 0 && de / kFp8Block <= kMaxKB;
}

void moe_expert_fused_fp8(const ExpertFusedFp8Args& a, cudaStream_t s) {
  MAGI2_CHECK(moe_expert_fused_fp8_supported(a.dh, a.de), "moe_expert_fused_fp8: needs d_head ", kDH,
              " and d_expert a multiple of ", kFp8Block, " up to ", kMaxKB * kFp8Block, " (got ", a.dh, ", ", a.de,
              ")");
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  MAGI2_CHECK(aligned(a.xq) && aligned(a.xs) && aligned(a.gate_t) && aligned(a.up_t) && aligned(a.down_t) &&
                  aligned(a.y) && a.nf >= 1 && a.wrow != nullptr && a.gate_scale && a.up_scale && a.down_scale,
              "moe_expert_fused_fp8: rows, scales, banks and output must be 16-byte aligned");
  MAGI2_CHECK(static_cast<int64_t>(a.nf) * a.de < (int64_t{1} << 31), "moe_expert_fused_fp8: the banks are too large");
  if (a.max_rows <= 0) return;
  static std::once_flag attr;
  std::call_once(attr, [] {
    MAGI2_CUDA_CHECK(cudaFuncSetAttribute(expert_fused_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kSmemBytes)));
  });
  const int64_t rows13 = static_cast<int64_t>(a.nf) * a.de, rows2 = static_cast<int64_t>(a.nf) * a.dh;
  const CUtensorMap tg = tma_map_2d(a.gate_t, TmaElem::kU8, rows13, a.dh, a.dh, kFp8Block, kBoxRows13,
                                    CU_TENSOR_MAP_SWIZZLE_128B, "moe_expert_fused_fp8 gate");
  const CUtensorMap tu = tma_map_2d(a.up_t, TmaElem::kU8, rows13, a.dh, a.dh, kFp8Block, kBoxRows13,
                                    CU_TENSOR_MAP_SWIZZLE_128B, "moe_expert_fused_fp8 up");
  const CUtensorMap td = tma_map_2d(a.down_t, TmaElem::kU8, rows2, a.de, a.de, kBC, kDH, CU_TENSOR_MAP_SWIZZLE_32B,
                                    "moe_expert_fused_fp8 down");
  expert_tile_scan<<<1, kExpertScanThreads, 0, s>>>(a.offsets, a.nf, a.tile_start);
  MAGI2_CUDA_CHECK_LAUNCH("moe_expert_fused_fp8 tile scan");
  const int64_t grid = (a.max_rows + kBM - 1) / kBM + a.nf;  // >= the tiles, no host sync
  MAGI2_CHECK(grid < (int64_t{1} << 31), "moe_expert_fused_fp8: too many rows for one launch (", a.max_rows, ")");
  expert_fused_fp8_kernel<<<static_cast<unsigned>(grid), kThreads, kSmemBytes, s>>>(
      tg, tu, td, a.xq, static_cast<int>(a.de), a.offsets, a.tile_start, a.nf,
      Fp8Scales{a.xs, a.gate_scale, a.up_scale, a.down_scale}, a.wrow, a.y);
  MAGI2_CUDA_CHECK_LAUNCH("moe_expert_fused_fp8");
}

}  // namespace magi2::cuda
