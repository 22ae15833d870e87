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
//   issue O += P(j - 1) V(j - 1) (P from registers);
//   wait for S(j) only, then the online softmax of S(j) while P V runs;
//   wait for P V, round P(j) in the registers P V reads, and rescale O by
//   chunk j's factor.
// In bf16, S's accumulator and P's A fragment pair element for element
// (value q of k-step s is accumulator value 8 s + q of the same thread).
//
// Softmax in base 2: with c = scale * log2(e), p = 2^(c s - c m) for the
// running row maximum m of the raw scores, l = sum p (fp32, before P's bf16
// rounding); O = bf16(acc / l) and LSE = ln(2) (c m + log2 l), the natural
// log-sum-exp of scale * s that cuDNN's statistics give. Keys past the
// sample's end are -inf before the maximum; query rows past it are computed
// but not stored.
//
// FP8 (kFp8, AttentionParams::fp8; operands from attention_fp8.cu): Q and K
// tiles e4m3 K-major, V as e4m3 V^T tiles (FP8 wgmma reads B only K-major).
// c = scale log2(e) sq sk_j changes per key tile, so m is kept in log2 units
// (the maximum of c s): p = 2^(c s + 8 - m), P = e4m3(p) (the factor 2^8 is
// exact in the exponent), LSE = ln(2) (m + log2 l - 8). O stays in the units of the
// last added V tile's scale: the rescale before P V(j) takes alpha sv_{j-1} /
// sv_j, the epilogue sv_last / l. P's e4m3 A fragment holds keys 4t..4t+3 of
// each 16 where the accumulator holds keys 2t, 2t + 1, 2t + 8, 2t + 9
// (t = lane % 4): the quantiser stores V^T's keys in that order, so P needs no
// shuffle either.
#include <cuda.h>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include <mutex>
#include <type_traits>

#include "core/error.h"
#include "cuda/attention_flash.h"
#include "cuda/attention_tiles.cuh"
#include "cuda/fp8_fragment.cuh"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/tma.h"
#include "ops/numerics.h"

namespace magi2::cuda {

namespace {

constexpr int kBM = kAttnTile;  // query rows per CTA (64 per consumer warpgroup)
constexpr int kHD = 128;        // head dim
constexpr int kThreads = 384;   // producer warpgroup + two consumer warpgroups
constexpr int kConsumerWarps = 8;
static_assert(24 * 128 + 240 * 256 <= 168 * kThreads, "setmaxnreg counts fit the launch's registers");

using Bf16 = cute::bfloat16_t;
using cute::_1;
using cute::_2;
using cute::_64;
using cute::Int;
namespace GMMA = cute::SM90::GMMA;

// Tiles, MMAs and shared memory for kBN keys a chunk. Q and the K chunk are
// K-major (head dim contiguous); the bf16 V chunk is MN-major (its N is the
// head dim), the FP8 V^T chunk K-major. Each is made of [rows, 128 bytes]
// blocks of 128-byte swizzled rows, one TMA box each (two in bf16, one in FP8).
template <bool kFp8_, int kBN_, int kStages_>
struct Traits {
  static constexpr bool kFp8 = kFp8_;
  static constexpr int kBN = kBN_, kStages = kStages_;
  using Elem = std::conditional_t<kFp8, cute::float_e4m3_t, Bf16>;
  static constexpr int kMmaK = kFp8 ? 32 : 16;          // wgmma K of the element type
  static constexpr int kBoxCols = 128 / sizeof(Elem);  // one 128-byte swizzle row
  static constexpr int kBoxes = kHD / kBoxCols;        // boxes per Q or K tile (and bf16 V tile)
  using LayoutQ = decltype(cute::tile_to_shape(GMMA::Layout_K_SW128_Atom<Elem>{}, cute::Shape<Int<kBM>, Int<kHD>>{}));
  using LayoutK = decltype(cute::tile_to_shape(GMMA::Layout_K_SW128_Atom<Elem>{}, cute::Shape<Int<kBN>, Int<kHD>>{}));
  using LayoutV = std::conditional_t<
      kFp8, decltype(cute::tile_to_shape(GMMA::Layout_K_SW128_Atom<Elem>{}, cute::Shape<Int<kHD>, Int<kBN>>{})),
      decltype(cute::tile_to_shape(GMMA::Layout_MN_SW128_Atom<Elem>{}, cute::Shape<Int<kHD>, Int<kBN>>{},
                                   cute::Step<_2, _1>{}))>;
  using MmaS = decltype(cute::make_tiled_mma(
      GMMA::ss_op_selector<Elem, Elem, float, cute::Shape<_64, Int<kBN>, Int<kMmaK>>, GMMA::Major::K,
                           GMMA::Major::K>(),
      cute::Layout<cute::Shape<_2, _1, _1>>{}));
  using MmaO = decltype(cute::make_tiled_mma(
      GMMA::rs_op_selector<Elem, Elem, float, cute::Shape<_64, Int<kHD>, Int<kMmaK>>, GMMA::Major::K,
                           kFp8 ? GMMA::Major::K : GMMA::Major::MN>(),
      cute::Layout<cute::Shape<_2, _1, _1>>{}));
  static constexpr int kElemsQ = static_cast<int>(cute::cosize_v<LayoutQ>);
  static constexpr int kElemsKV = static_cast<int>(cute::cosize_v<LayoutK>);
  static_assert(kElemsQ == kBM * kHD && kElemsKV == kBN * kHD && cute::cosize_v<LayoutV> == kElemsKV, "dense tiles");
  static_assert(kElemsKV * sizeof(Elem) % 1024 == 0, "stages stay aligned to the swizzle atoms");
  static_assert(!kFp8 || kBN == kAttnTile, "an FP8 key chunk is one scale tile");
  static constexpr uint32_t kBytesQ = kElemsQ * sizeof(Elem), kBytesKV = kElemsKV * sizeof(Elem);
  struct alignas(1024) Smem {
    Elem q[kElemsQ];
    Elem k[kStages][kElemsKV];
    Elem v[kStages][kElemsKV];
    uint64_t full_q, full_k[kStages], empty_k[kStages], full_v[kStages], empty_v[kStages];
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;  // + the base's alignment to the swizzle atoms
};

using Barrier = cutlass::arch::ClusterBarrier;
using TxBarrier = cutlass::arch::ClusterTransactionBarrier;
using dev::bf16x2_rn;
using dev::ex2_fast_f32;

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The FP8 scales of the kernel (FlashFp8Operands); unused in bf16.
struct Fp8Scales {
  const float* sq = nullptr;
  const float* sk = nullptr;
  const float* sv = nullptr;
};

// kPingPong: the two consumer warpgroups take turns issuing their chunk's
// GEMMs (two named barriers), so one's softmax runs under the other's GEMMs
// (FlashAttention-3's inter-warpgroup schedule); only when both have rows.
// kEmu (FP8 only): of every 8 accumulator values of S, the first kEmu take
// their exponential on the FMA pipe (exp2_fma_f32) instead of the SFU.
template <bool kFp8, int kBN, int kStages, bool kPingPong, int kEmu = 0>
__global__ void __launch_bounds__(kThreads, 1)
    attention_flash_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                           const __grid_constant__ CUtensorMap tm_v, const int32_t* __restrict__ cu, int nseq, int h,
                           float scale_log2, Fp8Scales f8, uint16_t* __restrict__ o, float* __restrict__ lse) {
  using namespace cute;
  using Tr = Traits<kFp8, kBN, kStages>;
  using Smem = typename Tr::Smem;
  using LayoutQ = typename Tr::LayoutQ;
  using LayoutK = typename Tr::LayoutK;
  using LayoutV = typename Tr::LayoutV;
  constexpr uint32_t kBytesQ = Tr::kBytesQ, kBytesKV = Tr::kBytesKV;
  constexpr int kBoxCols = Tr::kBoxCols, kBoxes = Tr::kBoxes;
  constexpr float kPOffset = kFp8 ? kFp8AttnPLog2 : 0.f;  // log2 of P's factor
  AttnTile t;
  if (!attn_tile(static_cast<int>(blockIdx.x), cu, nseq, t)) return;
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
    for (int b = 0; b < kBoxes; ++b)
      SM90_TMA_LOAD_2D::copy(&tm_q, &sm.full_q, kHintQ, &sm.q[b * kBoxCols * kBM], col0 + b * kBoxCols, q0);
    for (int j = 0; j < chunks; ++j) {
      const int s = j % kStages, ph = ((j / kStages) & 1) ^ 1;
      Barrier::wait(&sm.empty_k[s], ph);
      TxBarrier::arrive_and_expect_tx(&sm.full_k[s], kBytesKV);
      for (int b = 0; b < kBoxes; ++b)
        SM90_TMA_LOAD_2D::copy(&tm_k, &sm.full_k[s], kHint, &sm.k[s][b * kBoxCols * kBN], col0 + b * kBoxCols,
                               kv0 + j * kBN);
      Barrier::wait(&sm.empty_v[s], ph);
      TxBarrier::arrive_and_expect_tx(&sm.full_v[s], kBytesKV);
      if constexpr (kFp8) {  // V^T [H * 128, vt_cols]: the head's 128 rows, tile (first + j)'s columns
        SM90_TMA_LOAD_2D::copy(&tm_v, &sm.full_v[s], kHint, &sm.v[s][0], (t.first + j) * kAttnTile, col0);
      } else {
        for (int b = 0; b < kBoxes; ++b)
          SM90_TMA_LOAD_2D::copy(&tm_v, &sm.full_v[s], kHint, &sm.v[s][b * kBoxCols * kBN], col0 + b * kBoxCols,
                                 kv0 + j * kBN);
      }
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
  // P as the P V wgmma's register A operand: (MMA, MMA_M, MMA_K) bf16 or e4m3.
  auto p_shape = make_tensor(make_smem_ptr(&sm.q[0]), make_layout(cute::Shape<Int<kBM>, Int<kBN>>{}, LayoutRight{}));
  auto p = thr_o.partition_fragment_A(p_shape);
  static_assert(decltype(size(acc_s))::value == kBN / 2 && decltype(size(p))::value == kBN / 2, "fragment shapes");
  static_assert(decltype(size(acc_o))::value == kHD / 2, "fragment shapes");
  // Accumulator value i lies in row (i / 2) % 2 of the thread's two rows, and
  // column 8 (i / 4) + 2 (lane % 4) + i % 2 of the chunk.
  const int lane_col = 2 * (ct % 4);
  const int warp = (ct % 128) / 32, lane = ct % 32;
  const int64_t row0 = t.q0 + wg * 64 + warp * 16 + lane / 4;

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

  // Running state of the thread's two rows: the maximum (bf16: of the raw
  // scores; FP8: in log2 units), partial sums of p over the thread's columns
  // (reduced over the quad at the end), and the factor that moves O from the
  // previous maximum to the current one. cq: the rows' score factor before
  // the key tile's scale.
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2] = {1.f, 1.f}, cq[2];
  for (int r = 0; r < 2; ++r)
    cq[r] = kFp8 && row0 + 8 * r < t.end ? scale_log2 * f8.sq[(row0 + 8 * r) * h + head] : scale_log2;
  // FP8: the V scales of O's units (sv_o) and of the P in registers (sv_p).
  float sv_o = 1.f, sv_p = 1.f;
  auto tile_scale = [&](const float* sc, int j) { return kFp8 ? sc[(t.first + j) * h + head] : 1.f; };
  // Online softmax of a finished S(j) in place (acc_s becomes p in fp32); sk: K tile j's scale.
  auto softmax = [&](int j, float sk) {
    warpgroup_fence_operand(acc_s);
    const int64_t valid = t.end - t.begin - static_cast<int64_t>(j) * kBN;
    if (valid < kBN) {
      CUTE_UNROLL
      for (int i = 0; i < size(acc_s); ++i)
        if (8 * (i / 4) + lane_col + (i % 2) >= valid) acc_s(i) = -INFINITY;
    }
    // The rows' maxima as 4 partial maxima each (exact in any order; a chain of 32 dependent fmaxf's latency
    // sat on the softmax's critical path).
    float mxp[2][4], mx[2], c[2], neg[2];
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r)
      CUTE_UNROLL
      for (int u = 0; u < 4; ++u) mxp[r][u] = -INFINITY;
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i) mxp[(i / 2) % 2][(i / 8) % 4] = fmaxf(mxp[(i / 2) % 2][(i / 8) % 4], acc_s(i));
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) mx[r] = fmaxf(fmaxf(mxp[r][0], mxp[r][1]), fmaxf(mxp[r][2], mxp[r][3]));
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      // Every chunk has a live key in every row, so the new maximum is finite; m is -inf only before the
      // first chunk.
      if constexpr (kFp8) {
        c[r] = cq[r] * sk;
        const float m_new = fmaxf(m[r], quad_max(mx[r]) * c[r]);
        alpha[r] = ex2_fast_f32(m[r] - m_new);
        m[r] = m_new;
        neg[r] = kPOffset - m_new;
      } else {
        c[r] = scale_log2;
        const float m_new = fmaxf(m[r], quad_max(mx[r]));
        alpha[r] = ex2_fast_f32((m[r] - m_new) * scale_log2);
        m[r] = m_new;
        neg[r] = -m_new * scale_log2;
      }
    }
    float sum[2] = {0.f, 0.f};
    if constexpr (kFp8) {  // 4 partial sums a row, as the maxima
      float sp[2][4] = {};
      CUTE_UNROLL
      for (int i = 0; i < size(acc_s); ++i) {
        const int r = (i / 2) % 2;
        const float x = __fmaf_rn(acc_s(i), c[r], neg[r]);
        const float e = i % 8 < kEmu ? exp2_fma_f32(x) : ex2_fast_f32(x);
        acc_s(i) = e;
        sp[r][(i / 8) % 4] += e;
      }
      CUTE_UNROLL
      for (int r = 0; r < 2; ++r) sum[r] = (sp[r][0] + sp[r][1]) + (sp[r][2] + sp[r][3]);
    } else {
      CUTE_UNROLL
      for (int i = 0; i < size(acc_s); ++i) {
        const int r = (i / 2) % 2;
        const float e = ex2_fast_f32(__fmaf_rn(acc_s(i), c[r], neg[r]));
        acc_s(i) = e;
        sum[r] += e;
      }
    }
    l[0] = __fmaf_rn(l[0], alpha[0], sum[0]);
    l[1] = __fmaf_rn(l[1], alpha[1], sum[1]);
  };
  auto to_p = [&] {
    auto pw = cute::recast<uint32_t>(p);  // the bf16x2 or e4m3x4 of cvt.rn is the register
    if constexpr (kFp8) {
      static_assert(p8_fragment_matches_vt<typename Tr::MmaS, typename Tr::MmaO, kBN>(), "P's registers");
      CUTE_UNROLL
      for (int s = 0; s < kBN / 32; ++s)
        CUTE_UNROLL
        for (int q = 0; q < 4; ++q)
          pw(4 * s + q) = e4m3x4_rn(acc_s(p8_acc_index(s, 4 * q)), acc_s(p8_acc_index(s, 4 * q + 1)),
                                    acc_s(p8_acc_index(s, 4 * q + 2)), acc_s(p8_acc_index(s, 4 * q + 3)));
    } else {
      CUTE_UNROLL
      for (int i = 0; i < size(acc_s); i += 2) pw(i / 2) = bf16x2_rn(acc_s(i + 1), acc_s(i));
    }
    warpgroup_fence_operand(p);
  };
  auto rescale_o = [&] {
    const float ratio = kFp8 ? sv_o / sv_p : 1.f;
    const float f[2] = {alpha[0] * ratio, alpha[1] * ratio};
    warpgroup_fence_operand(acc_o);
    CUTE_UNROLL
    for (int i = 0; i < size(acc_o); ++i) acc_o(i) *= f[(i / 2) % 2];
    warpgroup_fence_operand(acc_o);
  };

  Barrier::wait(&sm.full_q, 0);
  float sk = tile_scale(f8.sk, 0), sv = tile_scale(f8.sv, 0);
  wait_k(0);
  turn_begin();
  issue_s(0);
  turn_end();
  warpgroup_wait<0>();
  release_k(0);
  softmax(0, sk);
  to_p();
  sv_p = sv;
  for (int j = 1; j < chunks; ++j) {
    sk = tile_scale(f8.sk, j);  // loads in flight under the wait and the GEMMs
    sv = tile_scale(f8.sv, j);
    wait_k(j);
    turn_begin();
    issue_s(j);
    wait_v(j - 1);
    issue_pv(j - 1);
    turn_end();
    sv_o = sv_p;
    warpgroup_wait<1>();  // S(j) done, P V(j - 1) in flight
    release_k(j);
    softmax(j, sk);
    warpgroup_wait<0>();
    release_v(j - 1);
    to_p();
    sv_p = sv;
    // O (P V of chunks <= j - 1) to chunk j's maximum before P V(j): here rather than in the next turn, so
    // the 64 multiplies do not hold up this warpgroup's GEMM issue and the other's turn (FlashAttention-3's
    // place for it too).
    rescale_o();
  }
  wait_v(chunks - 1);
  turn_begin();
  issue_pv(chunks - 1);
  turn_end();
  sv_o = sv_p;
  // Warpgroup 1's last turn_end arrives on warpgroup 0's barrier: consume it,
  // so both barriers end balanced.
  if (pingpong && wg == 0) cutlass::arch::NamedBarrier::sync(256, 1);
  warpgroup_wait<0>();
  release_v(chunks - 1);
  warpgroup_fence_operand(acc_o);

  // Epilogue: O sv_o / l as bf16 pairs and the rows' LSE (lane 0 of each quad).
  float inv[2];
  CUTE_UNROLL
  for (int r = 0; r < 2; ++r) {
    const float lr = quad_sum(l[r]);
    inv[r] = kFp8 ? sv_o / lr : 1.f / lr;
    const int64_t row = row0 + 8 * r;
    const float m_log2 = kFp8 ? m[r] - kPOffset : m[r] * scale_log2;
    if (lane % 4 == 0 && row < t.end) lse[row * h + head] = (m_log2 + log2f(lr)) * 0.69314718055994531f;
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

// TMA descriptors of one call: q, k [T, H * 128] and v (bf16 [T, H * 128], or
// the FP8 V^T [H * 128, vt_cols]).
struct Maps {
  CUtensorMap q, k, v;
};

template <bool kFp8, int kBN, int kStages, bool kPingPong, int kEmu = 0>
void launch(const AttentionParams& p, const AttentionShape& a, const Maps& m, Fp8Scales f8, cudaStream_t s) {
  constexpr size_t kSmem = Traits<kFp8, kBN, kStages>::kSmemBytes;
  static std::once_flag attr;
  std::call_once(attr, [] {
    MAGI2_CUDA_CHECK(cudaFuncSetAttribute(attention_flash_kernel<kFp8, kBN, kStages, kPingPong, kEmu>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
  });
  const int64_t tiles = attn_tiles_bound(a.t, a.nseq);
  const float scale_log2 = p.scale * 1.4426950408889634f;
  attention_flash_kernel<kFp8, kBN, kStages, kPingPong, kEmu>
      <<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(a.h)), kThreads, kSmem, s>>>(
          m.q, m.k, m.v, a.cu, static_cast<int>(a.nseq), static_cast<int>(a.h), scale_log2, f8,
          p.o.data_as<uint16_t>(), p.lse.data_as<float>());
  MAGI2_CUDA_CHECK_LAUNCH("attention_flash");
}

void check_flash(const AttentionParams& p, const AttentionShape& a) {
  MAGI2_CHECK(attention_flash_supported(a.hd), "attention_flash: needs head dim ", kHD, " (got ", a.hd, ")");
  MAGI2_CHECK(p.lse.defined(), "attention_flash: needs the lse output (the sink is deferred to attn_out)");
  MAGI2_CHECK(a.t < (int64_t{1} << 31) && a.nseq < (int64_t{1} << 30), "attention_flash: too many tokens (", a.t,
              ")");
}

}  // namespace

bool attention_flash_supported(int64_t hd) { return hd == kHD; }

void attention_flash(const AttentionParams& p, const AttentionShape& a, cudaStream_t s, FlashVariant v) {
  check_flash(p, a);
  if (a.t == 0 || a.h == 0) return;
  const int64_t cols = a.h * kHD;
  constexpr int kBox = 64;  // bf16 columns in a 128-byte swizzle row
  // 176 keys a chunk (FlashAttention-3's choice for head dim 128 without a
  // mask) measured ~25 % slower here (docs/perf.md), so only 128 is built.
  constexpr int kBN = 128;
  const Maps m{tma_map_2d(p.q.data(), TmaElem::kBf16, a.t, cols, cols, kBox, kBM, CU_TENSOR_MAP_SWIZZLE_128B,
                          "attention q"),
               tma_map_2d(p.k.data(), TmaElem::kBf16, a.t, cols, cols, kBox, kBN, CU_TENSOR_MAP_SWIZZLE_128B,
                          "attention k"),
               tma_map_2d(p.v.data(), TmaElem::kBf16, a.t, cols, cols, kBox, kBN, CU_TENSOR_MAP_SWIZZLE_128B,
                          "attention v")};
  if (v == FlashVariant::kNoPingPong) return launch<false, kBN, 2, false>(p, a, m, {}, s);
  if (v == FlashVariant::kThreeStages) return launch<false, kBN, 3, true>(p, a, m, {}, s);
  launch<false, kBN, 2, true>(p, a, m, {}, s);
}

void attention_flash_fp8(const AttentionParams& p, const AttentionShape& a, const FlashFp8Operands& f,
                         cudaStream_t s, Fp8FlashVariant v) {
  check_flash(p, a);
  if (a.t == 0 || a.h == 0) return;
  const int64_t cols = a.h * kHD;
  const Maps m{tma_map_2d(f.q, TmaElem::kU8, a.t, cols, cols, kHD, kBM, CU_TENSOR_MAP_SWIZZLE_128B, "attention q8"),
               tma_map_2d(f.k, TmaElem::kU8, a.t, cols, cols, kHD, kAttnTile, CU_TENSOR_MAP_SWIZZLE_128B,
                          "attention k8"),
               tma_map_2d(f.vt, TmaElem::kU8, cols, f.vt_cols, f.vt_cols, kAttnTile, kHD,
                          CU_TENSOR_MAP_SWIZZLE_128B, "attention v8^T")};
  const Fp8Scales f8{f.sq, f.sk, f.sv};
  // No ping-pong: in FP8 the GEMMs take half the time of bf16's while the softmax does not shrink, so the
  // turns left both warpgroups waiting (H100, bench_attention --fp8: 6 % slower with them; docs/perf.md).
  switch (v) {
    case Fp8FlashVariant::kPingPong: return launch<true, kAttnTile, 2, true>(p, a, m, f8, s);
    case Fp8FlashVariant::kThreeStages: return launch<true, kAttnTile, 3, false>(p, a, m, f8, s);
    case Fp8FlashVariant::kEmu2: return launch<true, kAttnTile, 2, false, 2>(p, a, m, f8, s);
    default: return launch<true, kAttnTile, 2, false>(p, a, m, f8, s);
  }
}

}  // namespace magi2::cuda
