// Flash attention forward for Hopper (attention_flash.h): TMA, wgmma and warp
// specialisation, in the plan of FlashAttention-3 (Shah et al. 2024), for the
// DiT's self-attention: head dim 128, ragged samples (cu_seqlens), no mask
// inside a sample, the learned sink deferred to attn_out through the LSE.
//
// CTA: one (128-row query tile of one sample, head), three warpgroups.
// Warpgroup 0 is the producer: one thread loads the query tile once and then
// the sample's key and value chunks of kBN tokens by TMA through two
// mbarrier rings (kStages deep). Warpgroups 1 and 2 each own 64 query rows; per chunk j:
//   issue S(j) = Q K(j)^T [64, kBN] (fp32, wgmma from shared memory);
//   rescale O by the previous chunk's factor, issue O += P(j - 1) V(j - 1)
//   (P from registers);
//   wait for S(j) only, then the online softmax of S(j) while P V runs;
//   wait for P V, then round P(j) to bf16 in the registers P V read.
// S's accumulator and P's A fragment pair element for element (value q of
// k-step s is accumulator value 8 s + q of the same thread), so no shuffles.
//
// Softmax in base 2: with c = scale * log2(e), p = 2^(c s - c m) for the
// running row maximum m of the raw scores, l = sum p (fp32, before P's bf16
// rounding); O = bf16(acc / l) and LSE = ln(2) (c m + log2 l), the natural
// log-sum-exp of scale * s that cuDNN's statistics give. Keys past the
// sample's end are -inf before the maximum; query rows past it are computed
// but not stored.
#include <cuda.h>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include <mutex>

#include "core/error.h"
#include "cuda/attention_flash.h"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/tma.h"

namespace magi2::cuda {

namespace {

constexpr int kBM = 128;  // query rows per CTA (64 per consumer warpgroup)
constexpr int kHD = 128;  // head dim
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kConsumerWarps = 8;
static_assert(24 * 128 + 240 * 256 <= 168 * kThreads, "setmaxnreg counts fit the launch's registers");

using Bf16 = cute::bfloat16_t;
using cute::_1;
using cute::_16;
using cute::_2;
using cute::_64;
using cute::Int;
namespace GMMA = cute::SM90::GMMA;

// Tiles, MMAs and shared memory for kBN keys a chunk. Q and the K chunk are
// K-major (head dim contiguous), the V chunk MN-major (its N is the head
// dim). Each is two [rows, 64] blocks of 128-byte swizzled rows, one TMA box
// each.
template <int kBN_, int kStages_>
struct Traits {
  static constexpr int kBN = kBN_, kStages = kStages_;
  using LayoutQ = decltype(cute::tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, cute::Shape<Int<kBM>, Int<kHD>>{}));
  using LayoutK = decltype(cute::tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, cute::Shape<Int<kBN>, Int<kHD>>{}));
  using LayoutV = decltype(cute::tile_to_shape(GMMA::Layout_MN_SW128_Atom<Bf16>{}, cute::Shape<Int<kHD>, Int<kBN>>{},
                                               cute::Step<_2, _1>{}));
  using MmaS = decltype(cute::make_tiled_mma(
      GMMA::ss_op_selector<Bf16, Bf16, float, cute::Shape<_64, Int<kBN>, _16>, GMMA::Major::K, GMMA::Major::K>(),
      cute::Layout<cute::Shape<_2, _1, _1>>{}));
  using MmaO = decltype(cute::make_tiled_mma(
      GMMA::rs_op_selector<Bf16, Bf16, float, cute::Shape<_64, Int<kHD>, _16>, GMMA::Major::K, GMMA::Major::MN>(),
      cute::Layout<cute::Shape<_2, _1, _1>>{}));
  static constexpr int kElemsQ = static_cast<int>(cute::cosize_v<LayoutQ>);
  static constexpr int kElemsKV = static_cast<int>(cute::cosize_v<LayoutK>);
  static_assert(kElemsQ == kBM * kHD && kElemsKV == kBN * kHD && cute::cosize_v<LayoutV> == kElemsKV, "dense tiles");
  static_assert(kElemsKV * 2 % 1024 == 0, "stages stay aligned to the swizzle atoms");
  static constexpr uint32_t kBytesQ = kElemsQ * 2, kBytesKV = kElemsKV * 2;
  struct alignas(1024) Smem {
    Bf16 q[kElemsQ];
    Bf16 k[kStages][kElemsKV];
    Bf16 v[kStages][kElemsKV];
    uint64_t full_q, full_k[kStages], empty_k[kStages], full_v[kStages], empty_v[kStages];
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;  // + the base's alignment to the swizzle atoms
};

using Barrier = cutlass::arch::ClusterBarrier;
using TxBarrier = cutlass::arch::ClusterTransactionBarrier;
using dev::bf16x2_rn;

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Tile `tile` of the grid's x: its sample b, first query row q0 (absolute
// token) and the sample's [begin, end). False past the last sample's tiles.
struct QTile {
  int64_t q0, begin, end;
};
__device__ __forceinline__ bool q_tile(int tile, const int32_t* __restrict__ cu, int nseq, QTile& t) {
  for (int b = 0; b < nseq; ++b) {
    const int64_t begin = cu[b], end = cu[b + 1];
    const int tiles = static_cast<int>((end - begin + kBM - 1) / kBM);
    if (tile < tiles) {
      t = {begin + static_cast<int64_t>(tile) * kBM, begin, end};
      return true;
    }
    tile -= tiles;
  }
  return false;
}

// kPingPong: the two consumer warpgroups take turns issuing their chunk's
// GEMMs (two named barriers), so one's softmax runs under the other's GEMMs
// (FlashAttention-3's inter-warpgroup schedule); only when both have rows.
template <int kBN, int kStages, bool kPingPong>
__global__ void __launch_bounds__(kThreads, 1)
    attention_flash_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                           const __grid_constant__ CUtensorMap tm_v, const int32_t* __restrict__ cu, int nseq, int h,
                           float scale_log2, uint16_t* __restrict__ o, float* __restrict__ lse) {
  using namespace cute;
  using Tr = Traits<kBN, kStages>;
  using Smem = typename Tr::Smem;
  using LayoutQ = typename Tr::LayoutQ;
  using LayoutK = typename Tr::LayoutK;
  using LayoutV = typename Tr::LayoutV;
  constexpr uint32_t kBytesQ = Tr::kBytesQ, kBytesKV = Tr::kBytesKV;
  QTile t;
  if (!q_tile(static_cast<int>(blockIdx.x), cu, nseq, t)) return;
  const int head = static_cast<int>(blockIdx.y);
  const int chunks = static_cast<int>((t.end - t.begin + kBN - 1) / kBN);
  const int col0 = head * kHD;

  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    TxBarrier::init(&sm.full_q, 1);
    for (int i = 0; i < kStages; ++i) {
      TxBarrier::init(&sm.full_k[i], 1);
      Barrier::init(&sm.empty_k[i], kConsumerWarps);
      TxBarrier::init(&sm.full_v[i], 1);
      Barrier::init(&sm.empty_v[i], kConsumerWarps);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (tid < 128) {  // producer warpgroup: one thread issues every load
    cutlass::arch::warpgroup_reg_dealloc<24>();
    if (tid != 0) return;
    // Each key and value chunk serves every query tile of its sample and head: keep them in L2.
    constexpr uint64_t kHintQ = static_cast<uint64_t>(TMA::CacheHintSm90::EVICT_FIRST);
    constexpr uint64_t kHint = static_cast<uint64_t>(TMA::CacheHintSm90::EVICT_LAST);
    const int q0 = static_cast<int>(t.q0), kv0 = static_cast<int>(t.begin);
    TxBarrier::arrive_and_expect_tx(&sm.full_q, kBytesQ);
    for (int b = 0; b < kHD / 64; ++b)
      SM90_TMA_LOAD_2D::copy(&tm_q, &sm.full_q, kHintQ, &sm.q[b * 64 * kBM], col0 + b * 64, q0);
    for (int j = 0; j < chunks; ++j) {
      const int s = j % kStages, ph = ((j / kStages) & 1) ^ 1;
      Barrier::wait(&sm.empty_k[s], ph);
      TxBarrier::arrive_and_expect_tx(&sm.full_k[s], kBytesKV);
      for (int b = 0; b < kHD / 64; ++b)
        SM90_TMA_LOAD_2D::copy(&tm_k, &sm.full_k[s], kHint, &sm.k[s][b * 64 * kBN], col0 + b * 64, kv0 + j * kBN);
      Barrier::wait(&sm.empty_v[s], ph);
      TxBarrier::arrive_and_expect_tx(&sm.full_v[s], kBytesKV);
      for (int b = 0; b < kHD / 64; ++b)
        SM90_TMA_LOAD_2D::copy(&tm_v, &sm.full_v[s], kHint, &sm.v[s][b * 64 * kBN], col0 + b * 64, kv0 + j * kBN);
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<240>();
  const int ct = tid - 128;  // consumer thread 0..255: warpgroup ct / 128 owns query rows 64 (ct / 128) ..
  const int wg = ct / 128;
  const bool signal = (ct & 31) == 0;  // one arrival per consumer warp on the empty barriers
  auto wait_k = [&](int j) { Barrier::wait(&sm.full_k[j % kStages], (j / kStages) & 1); };
  auto wait_v = [&](int j) { Barrier::wait(&sm.full_v[j % kStages], (j / kStages) & 1); };
  auto release_k = [&](int j) {
    if (signal) Barrier::arrive(&sm.empty_k[j % kStages]);
  };
  auto release_v = [&](int j) {
    if (signal) Barrier::arrive(&sm.empty_v[j % kStages]);
  };
  if (t.q0 + wg * 64 >= t.end) {
    // All 64 rows past the sample's end: only keep the empty barriers' counts.
    for (int j = 0; j < chunks; ++j) {
      wait_k(j);
      release_k(j);
      wait_v(j);
      release_v(j);
    }
    return;
  }

  typename Tr::MmaS mma_s;
  typename Tr::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(ct);
  auto thr_o = mma_o.get_thread_slice(ct);
  auto sQ = make_tensor(make_smem_ptr(&sm.q[0]), LayoutQ{});
  auto tSrQ = thr_s.make_fragment_A(thr_s.partition_A(sQ));  // descriptors (MMA, MMA_M, MMA_K)
  auto acc_s = partition_fragment_C(mma_s, cute::Shape<Int<kBM>, Int<kBN>>{});
  auto acc_o = partition_fragment_C(mma_o, cute::Shape<Int<kBM>, Int<kHD>>{});
  // P as the P V wgmma's register A operand: (MMA, MMA_M, MMA_K) bf16.
  auto p_shape = make_tensor(make_smem_ptr(&sm.q[0]), make_layout(cute::Shape<Int<kBM>, Int<kBN>>{}, LayoutRight{}));
  auto p = thr_o.partition_fragment_A(p_shape);
  static_assert(decltype(size(acc_s))::value == kBN / 2 && decltype(size(p))::value == kBN / 2, "fragment shapes");
  static_assert(decltype(size(acc_o))::value == kHD / 2, "fragment shapes");
  // Accumulator value i lies in row (i / 2) % 2 of the thread's two rows, and
  // column 8 (i / 4) + 2 (lane % 4) + i % 2 of the chunk.
  const int lane_col = 2 * (ct % 4);

  // Ping-pong: warpgroup w issues after named barrier 1 + w completes (its
  // own 128 threads + the other's 128 arrivals), then lets the other go.
  const bool pingpong = kPingPong && t.q0 + 64 < t.end;  // both warpgroups have rows
  auto turn_begin = [&] {
    if (pingpong) cutlass::arch::NamedBarrier::sync(256, 1 + wg);
  };
  auto turn_end = [&] {
    if (pingpong) cutlass::arch::NamedBarrier::arrive(256, 2 - wg);
  };
  if (pingpong && wg == 1) cutlass::arch::NamedBarrier::arrive(256, 1);  // warpgroup 0 goes first
  auto issue_s = [&](int j) {
    auto sK = make_tensor(make_smem_ptr(&sm.k[j % kStages][0]), LayoutK{});
    auto tB = thr_s.make_fragment_B(thr_s.partition_B(sK));
    warpgroup_fence_operand(acc_s);
    warpgroup_arrive();
    mma_s.accumulate_ = GMMA::ScaleOut::Zero;
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tSrQ); ++kb) {
      gemm(mma_s, tSrQ(_, _, kb), tB(_, _, kb), acc_s);
      mma_s.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
  };
  auto issue_pv = [&](int j) {
    auto sV = make_tensor(make_smem_ptr(&sm.v[j % kStages][0]), LayoutV{});
    auto tB = thr_o.make_fragment_B(thr_o.partition_B(sV));
    warpgroup_fence_operand(p);
    warpgroup_fence_operand(acc_o);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(p); ++kb) {
      mma_o.accumulate_ = j == 0 && kb == 0 ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
      gemm(mma_o, p(_, _, kb), tB(_, _, kb), acc_o);
    }
    warpgroup_commit_batch();
  };

  // Running state of the thread's two rows: raw-score maximum, partial sums
  // of p over the thread's columns (reduced over the quad at the end), and
  // the factor that moves O from the previous maximum to the current one.
  float m_raw[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2] = {1.f, 1.f};
  // Online softmax of a finished S(j) in place (acc_s becomes p in fp32).
  auto softmax = [&](int j) {
    warpgroup_fence_operand(acc_s);
    const int64_t valid = t.end - t.begin - static_cast<int64_t>(j) * kBN;
    if (valid < kBN) {
      CUTE_UNROLL
      for (int i = 0; i < size(acc_s); ++i)
        if (8 * (i / 4) + lane_col + (i % 2) >= valid) acc_s(i) = -INFINITY;
    }
    float mx[2] = {m_raw[0], m_raw[1]};
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i) mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], acc_s(i));
    float neg[2];
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);
      // m_raw is -inf only before the first chunk, whose every row has a live key.
      alpha[r] = ex2((m_raw[r] - mx[r]) * scale_log2);
      m_raw[r] = mx[r];
      neg[r] = -mx[r] * scale_log2;
    }
    float sum[2] = {0.f, 0.f};
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i) {
      const float e = ex2(__fmaf_rn(acc_s(i), scale_log2, neg[(i / 2) % 2]));
      acc_s(i) = e;
      sum[(i / 2) % 2] += e;
    }
    l[0] = __fmaf_rn(l[0], alpha[0], sum[0]);
    l[1] = __fmaf_rn(l[1], alpha[1], sum[1]);
  };
  auto to_p = [&] {
    auto pw = cute::recast<uint32_t>(p);  // the bf16x2 of cvt.rn is the register
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); i += 2) pw(i / 2) = bf16x2_rn(acc_s(i + 1), acc_s(i));
    warpgroup_fence_operand(p);
  };
  auto rescale_o = [&] {
    warpgroup_fence_operand(acc_o);
    CUTE_UNROLL
    for (int i = 0; i < size(acc_o); ++i) acc_o(i) *= alpha[(i / 2) % 2];
    warpgroup_fence_operand(acc_o);
  };

  Barrier::wait(&sm.full_q, 0);
  wait_k(0);
  turn_begin();
  issue_s(0);
  turn_end();
  warpgroup_wait<0>();
  release_k(0);
  softmax(0);
  to_p();
  for (int j = 1; j < chunks; ++j) {
    wait_k(j);
    turn_begin();
    issue_s(j);
    if (j > 1) rescale_o();  // O holds P V of chunks < j - 1 (none before j = 2)
    wait_v(j - 1);
    issue_pv(j - 1);
    turn_end();
    warpgroup_wait<1>();  // S(j) done, P V(j - 1) in flight
    release_k(j);
    softmax(j);
    warpgroup_wait<0>();
    release_v(j - 1);
    to_p();
  }
  if (chunks > 1) rescale_o();
  wait_v(chunks - 1);
  turn_begin();
  issue_pv(chunks - 1);
  turn_end();
  // Warpgroup 1's last turn_end arrives on warpgroup 0's barrier: consume it,
  // so both barriers end balanced.
  if (pingpong && wg == 0) cutlass::arch::NamedBarrier::sync(256, 1);
  warpgroup_wait<0>();
  release_v(chunks - 1);
  warpgroup_fence_operand(acc_o);

  // Epilogue: O / l as bf16 pairs and the rows' LSE (lane 0 of each quad).
  float inv[2];
  const int warp = (ct % 128) / 32, lane = ct % 32;
  const int64_t row0 = t.q0 + wg * 64 + warp * 16 + lane / 4;
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    const float lr = quad_sum(l[r]);
    inv[r] = 1.f / lr;
    const int64_t row = row0 + 8 * r;
    if (lane % 4 == 0 && row < t.end) lse[row * h + head] = (m_raw[r] * scale_log2 + log2f(lr)) * 0.69314718055994531f;
  }
  CUTE_UNROLL
  for (int i = 0; i < size(acc_o); i += 2) {
    const int r = (i / 2) % 2;
    const int64_t row = row0 + 8 * r;
    if (row < t.end) {
      const int col = 8 * (i / 4) + lane_col;
      *reinterpret_cast<uint32_t*>(o + (row * h + head) * kHD + col) =
          bf16x2_rn(acc_o(i + 1) * inv[r], acc_o(i) * inv[r]);
    }
  }
}

template <int kBN, int kStages, bool kPingPong>
void launch(const AttentionParams& p, const AttentionShape& a, cudaStream_t s) {
  constexpr size_t kSmem = Traits<kBN, kStages>::kSmemBytes;
  static std::once_flag attr;
  std::call_once(attr, [] {
    MAGI2_CUDA_CHECK(cudaFuncSetAttribute(attention_flash_kernel<kBN, kStages, kPingPong>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
  });
  const int64_t cols = a.h * kHD;
  const CUtensorMap tq = tma_map_bf16(p.q.data(), a.t, cols, cols, 64, kBM, CU_TENSOR_MAP_SWIZZLE_128B, "attention q");
  const CUtensorMap tk = tma_map_bf16(p.k.data(), a.t, cols, cols, 64, kBN, CU_TENSOR_MAP_SWIZZLE_128B, "attention k");
  const CUtensorMap tv = tma_map_bf16(p.v.data(), a.t, cols, cols, 64, kBN, CU_TENSOR_MAP_SWIZZLE_128B, "attention v");
  // Tiles <= sum over samples of (len / kBM + 1): the grid's bound without reading cu_seqlens.
  const int64_t tiles = (a.t + kBM - 1) / kBM + a.nseq;
  const float scale_log2 = p.scale * 1.4426950408889634f;
  attention_flash_kernel<kBN, kStages, kPingPong>
      <<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(a.h)), kThreads, kSmem, s>>>(
          tq, tk, tv, a.cu, static_cast<int>(a.nseq), static_cast<int>(a.h), scale_log2, p.o.data_as<uint16_t>(),
          p.lse.data_as<float>());
  MAGI2_CUDA_CHECK_LAUNCH("attention_flash");
}

}  // namespace

bool attention_flash_supported(int64_t hd) { return hd == kHD; }

void attention_flash(const AttentionParams& p, const AttentionShape& a, cudaStream_t s, FlashVariant v) {
  MAGI2_CHECK(attention_flash_supported(a.hd), "attention_flash: needs head dim ", kHD, " (got ", a.hd, ")");
  MAGI2_CHECK(p.lse.defined(), "attention_flash: needs the lse output (the sink is deferred to attn_out)");
  MAGI2_CHECK(a.t < (int64_t{1} << 31) && a.nseq < (int64_t{1} << 30), "attention_flash: too many tokens (", a.t,
              ")");
  if (a.t == 0 || a.h == 0) return;
  // 176 keys a chunk (FlashAttention-3's choice for head dim 128 without a
  // mask) measured ~25 % slower here (docs/perf.md), so only 128 is built.
  if (v == FlashVariant::kNoPingPong) return launch<128, 2, false>(p, a, s);
  if (v == FlashVariant::kThreeStages) return launch<128, 3, true>(p, a, s);
  launch<128, 2, true>(p, a, s);
}

}  // namespace magi2::cuda
