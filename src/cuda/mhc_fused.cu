// The opt-in fast mHC kernels (fused_kernels.h; spec magi2-dit.md §9). The
// shapes were checked by the reference entry points in mhc.cu.
//
// Memory traffic at 272p (29,872 tokens, 12,288 bf16 state values each,
// 734 MB): logits read the state once; pre reads it once and writes the
// branch input (183 MB); post + residual reads state and branch output and
// writes the state. Together ~3.3 GB per branch (~0.8 ms at 4 TB/s).
#include <cstdint>

#include "cuda/cp_async.cuh"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/fused_kernels.h"
#include "cuda/mhc_coef.cuh"
#include "cuda/mhc_post.cuh"
#include "cuda/mma_split.cuh"

namespace magi2::cuda {

namespace {

using namespace dev;

constexpr int kStreams = 4;
constexpr int kLogits = 24;
constexpr int kLogitTiles = kLogits / 8;  // n-tiles of mma.m16n8k16

// ---- logits --------------------------------------------------------------------

// Thread per (group m, chunk q, n-tile nt, lane): the 8 values
// (w_m[k] + 1) * phi[k][n] of its fragment-native unit (mma_split.cuh), split in three.
__global__ void mhc_phi_split_kernel(const float* __restrict__ phi, const float* __restrict__ w, int64_t vw, int groups,
                                     uint4* __restrict__ out) {
  const int64_t nq = vw / kChunkK;
  const int64_t units = groups * nq * kLogitTiles * 32;
  const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= units) return;
  const int lane = static_cast<int>(u % 32);
  const int nt = static_cast<int>((u / 32) % kLogitTiles);
  const int64_t q = (u / (32 * kLogitTiles)) % nq;
  const int64_t m = u / (32 * kLogitTiles * nq);
  const int n = nt * 8 + lane / 4;
  const int64_t k0 = q * kChunkK + 8 * (lane % 4);
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = phi[(k0 + j) * kLogits + n] * (w[m * vw + k0 + j] + 1.0f);
  store_split_units(v, out, [&](int s) { return (((m * nq + q) * kSplits + s) * kLogitTiles + nt) * 32 + lane; });
}

// 64 tokens (4 m-tiles) per block of 8 warps; warp w takes the chunks q = w
// (mod 8) of every row, so the 8 warps stream the rows' 24 KB together. Each
// lane owns 8 rows (m-tile i / 2, row g + 8 (i % 2)). The partial logits and
// sums of squares of the 8 warps meet in shared memory and are added in warp
// order (deterministic). A block whose tokens span weight groups repeats the
// k loop per group with the other groups' rows zeroed (only boundary blocks).
// Both kernels below follow this plan with the same fp32 operations in the
// same order per output (same bytes); they differ only in how the state
// reaches the registers.
constexpr int kLgTokens = 64;
constexpr int kLgWarps = 8;
constexpr int kLgThreads = kLgWarps * 32;
constexpr int kLgRows = 8;  // rows per lane
constexpr size_t kLgShared = (static_cast<size_t>(kLgWarps) * kLgTokens * kLogits + kLgWarps * kLgTokens) * 4;

// Row i of lane group g: m-tile i / 2, row g + 8 (i % 2) of the tile.
__device__ __forceinline__ int lg_token(int i, int g) { return g + 8 * i; }

// Bit i: row i of this lane is a token (of any group).
__device__ __forceinline__ unsigned lg_live(int64_t r0, int g, int64_t t) {
  unsigned live = 0;
#pragma unroll
  for (int i = 0; i < kLgRows; ++i)
    if (r0 + lg_token(i, g) < t) live |= 1u << i;
  return live;
}

// Bit i: row i is a token of weight group m.
__device__ __forceinline__ unsigned lg_in_group(unsigned live, int64_t r0, int g, int4 cu, int groups, int m) {
  unsigned in_m = 0;
#pragma unroll
  for (int i = 0; i < kLgRows; ++i)
    if (((live >> i) & 1u) && group_of(cu, groups, r0 + lg_token(i, g)) == m) in_m |= 1u << i;
  return in_m;
}

// ss[i] += x^2 over the 8 values of row i's load (the lane's share of the row's sum of squares).
__device__ __forceinline__ void lg_add_squares(float& ss, const uint4& a) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float v = bf16_at(a, j);
    ss += v * v;
  }
}

// The epilogue of both kernels: each warp's partial logits (acc, C fragments
// of m-tile mt, n-tile nt) and sums of squares go to shared memory `red`, then
// a thread per (token, logit) adds the 8 warps' partials in warp order and
// scales by rs = 1 / sqrt(mean x^2 + eps). Contains the block barrier.
__device__ __forceinline__ void lg_finish(float* red, const float (&acc)[4][kLogitTiles][4], const float (&ss)[kLgRows],
                                          int64_t r0, float* __restrict__ logits, int64_t ldl, int64_t vw, float eps,
                                          int64_t t) {
  float* part = red;                                 // [warp][token][24]
  float* sq = red + kLgWarps * kLgTokens * kLogits;  // [warp][token]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, quad = lane & 3;
  // C fragment: c0, c1 row g, columns 2 quad + {0, 1}; c2, c3 row g + 8.
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int nt = 0; nt < kLogitTiles; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int tok = mt * 16 + g + (c >> 1) * 8, col = nt * 8 + 2 * quad + (c & 1);
        part[(warp * kLgTokens + tok) * kLogits + col] = acc[mt][nt][c];
      }
#pragma unroll
  for (int i = 0; i < kLgRows; ++i) {
    float v = ss[i];
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    if (quad == 0) sq[warp * kLgTokens + lg_token(i, g)] = v;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kLgTokens * kLogits; e += blockDim.x) {
    const int tok = e / kLogits, col = e % kLogits;
    const int64_t r = r0 + tok;
    if (r >= t) continue;
    float s2 = 0.f, l = 0.f;
    for (int w = 0; w < kLgWarps; ++w) {
      s2 += sq[w * kLgTokens + tok];
      l += part[(w * kLgTokens + tok) * kLogits + col];
    }
    const float rs = 1.0f / sqrtf(s2 * (1.0f / static_cast<float>(vw)) + eps);
    logits[r * ldl + col] = l * rs;
  }
}

// ---- the pipelined logits kernel --------------------------------------------------
//
// The same plan, but each thread streams its own 8 rows x 16 bytes per chunk
// through a private ring of kStages slots in shared memory with cp.async:
// while a warp runs the MMAs of its chunk n, its chunks n + 1 .. n + kStages - 1
// are in flight (kStages - 1 x 4 KB per warp, no registers held). A thread
// reads back only what it copied itself, so cp.async.wait_group is the only
// synchronisation (no barrier in the loop). The B units of a chunk are loaded
// once, before the wait (9 x 16 bytes a lane), and serve all 4 m-tiles: the A
// fragments are re-read from shared memory per n-tile instead of keeping all
// 32 of their registers live. The ring then holds the epilogue's partials.

template <int kStages>
constexpr size_t lg_ring_shared() {
  const size_t ring = static_cast<size_t>(kStages) * kLgRows * kLgThreads * sizeof(uint4);
  return ring > kLgShared ? ring : kLgShared;
}

template <int kStages, int kMinBlocks>
__global__ void __launch_bounds__(kLgThreads, kMinBlocks)
    mhc_logits_ring_kernel(const uint16_t* __restrict__ state, int64_t lds, const uint4* __restrict__ split,
                           float* __restrict__ logits, int64_t ldl, int64_t vw, int4 cu, int groups, float eps,
                           int64_t t) {
  extern __shared__ uint4 ring[];  // [slot][row i][thread]: conflict-free 16-byte accesses per warp
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, quad = lane & 3;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kLgTokens;
  const int nq = static_cast<int>(vw / kChunkK);
  const int nw = warp < nq ? (nq - 1 - warp) / kLgWarps + 1 : 0;  // chunks of this warp: q = warp + 8 n
  const unsigned live = lg_live(r0, g, t);
  const int64_t r_last = (r0 + kLgTokens < t ? r0 + kLgTokens : t) - 1;
  const int m_first = group_of(cu, groups, r0), m_last = group_of(cu, groups, r_last);
  float acc[4][kLogitTiles][4] = {};
  float ss[kLgRows] = {};
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  const uint16_t* row0 = state + (r0 + g) * lds + 8 * quad;  // row i of the lane: row0 + i * row_step
  const int64_t row_step = 8 * lds;
  uint4* mine = ring + threadIdx.x;  // slot k, row i: mine[(k * kLgRows + i) * kLgThreads]
  // Chunk n of this warp into slot n % kStages (rows past the end are not copied:
  // their slots are never read), then one commit group per call, empty or not.
  auto issue = [&](int n) {
    if (n < nw) {
      const int64_t col = static_cast<int64_t>(warp + n * kLgWarps) * kChunkK;
      uint4* slot = mine + (n % kStages) * kLgRows * kLgThreads;
#pragma unroll
      for (int i = 0; i < kLgRows; ++i)
        if ((live >> i) & 1u) cp_async16(slot + i * kLgThreads, row0 + i * row_step + col);
    }
    cp_async_commit();
  };
  for (int m = m_first; m <= m_last; ++m) {
    const unsigned in_m = lg_in_group(live, r0, g, cu, groups, m);
    const uint4* bm = split + static_cast<int64_t>(m) * nq * kSplits * kLogitTiles * 32 + lane;
#pragma unroll 1
    for (int n = 0; n < kStages - 1; ++n) issue(n);
#pragma unroll 1
    for (int n = 0; n < nw; ++n) {
      const int64_t q = warp + n * kLgWarps;
      uint4 b[kLogitTiles][kSplits];
#pragma unroll
      for (int nt = 0; nt < kLogitTiles; ++nt)
#pragma unroll
        for (int s = 0; s < kSplits; ++s) b[nt][s] = __ldg(bm + ((q * kSplits + s) * kLogitTiles + nt) * 32);
      issue(n + kStages - 1);        // refills the slot chunk n - 1 used (read back by this thread already)
      cp_async_wait<kStages - 1>();  // this thread's copies of chunk n have landed
      const uint4* slot = mine + (n % kStages) * kLgRows * kLgThreads;
#pragma unroll
      for (int nt = 0; nt < kLogitTiles; ++nt)
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
          uint4 a[2];  // rows 2 mt (tile row g) and 2 mt + 1 (tile row g + 8)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int i = 2 * mt + h;
            a[h] = ((live >> i) & 1u) ? slot[i * kLgThreads] : zero;
            if (nt == 0 && m == m_first) lg_add_squares(ss[i], a[h]);
            if (!((in_m >> i) & 1u)) a[h] = zero;
          }
          // The chunk's split terms on a zeroed accumulator, then one IEEE add (as the direct kernel).
          float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
          for (int s = 0; s < kSplits; ++s) mma_chunk(part, a[0], a[1], b[nt][s]);
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[mt][nt][c] += part[c];
        }
    }
    cp_async_wait<0>();
  }
  __syncthreads();  // every thread is done with its ring before the epilogue reuses the memory
  lg_finish(reinterpret_cast<float*>(ring), acc, ss, r0, logits, ldl, vw, eps, t);
}

// Lets `kernel` take `shared` bytes of dynamic shared memory with the largest
// carveout (the ring kernels stream past L1). Not a stream operation, so fine
// during graph capture; callers run it once (a function-local static).
bool opt_in_shared(const void* kernel, size_t shared) {
  MAGI2_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
  MAGI2_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        static_cast<int>(cudaSharedmemCarveoutMaxShared)));
  return true;
}

// Launches the ring kernel sized for kMinBlocks blocks an SM (kStages x 32 KB of
// shared memory a block). The largest shared-memory carveout: the rest of L1 is
// not needed (the state bypasses it, each B unit is read once per warp).
template <int kStages, int kMinBlocks>
void launch_logits_ring(unsigned grid, cudaStream_t s, const uint16_t* x, int64_t lds, const uint4* split, float* out,
                        int64_t ldl, int64_t vw, int4 cu, int groups, float eps, int64_t t) {
  constexpr auto kernel = mhc_logits_ring_kernel<kStages, kMinBlocks>;
  constexpr size_t shared = lg_ring_shared<kStages>();
  static const bool opted_in = opt_in_shared(reinterpret_cast<const void*>(kernel), shared);
  (void)opted_in;
  kernel<<<grid, kLgThreads, shared, s>>>(x, lds, split, out, ldl, vw, cu, groups, eps, t);
}

// ---- post + residual (the pre-mix is in mhc_pre.cu) ---------------------------------

constexpr int kVecWarps = 8;  // warps a block

// 32 tokens per block: warp 0 forms H_post and runs Sinkhorn (a lane per
// token, the reference's operations and orders), then every warp updates the
// state of 4 tokens in place (a lane owns 8 columns across the 4 streams).
// The state and o reach the registers through a per-thread cp.async ring
// (as the logits kernel's): the warp's 4 tokens x ceil(D / 256) column steps
// form one sequence, kPostStages - 1 steps of it in flight (2.5 KB a warp
// each); the first ones are issued before the Sinkhorn phase, so the block's
// loads run while warp 0 computes. Every element is read (at step k - 2) before
// the same thread writes it (at step k): in place is safe.
constexpr int kPostTokens = 32;
constexpr int kCoef = kStreams + kStreams * kStreams;  // H_post, H_res
constexpr int kPostStages = 3;  // 60 KB a block: three blocks an SM (2 x 2.5 KB ahead per warp, 120 KB an SM)
constexpr int kPostBlocks = 3;
constexpr int kPostLoads = kStreams + 1;  // the 4 streams and o
constexpr size_t kPostShared = static_cast<size_t>(kPostStages) * kPostLoads * kVecWarps * 32 * sizeof(uint4);

// H_post and H_res of the block's tokens (thread i < kPostTokens takes token
// r0 + i; mhc_post_coefs with the shared-memory exp table) into coef, and into
// h_post / h_res when given. Both post kernels; the caller synchronises before
// (the exp table) and after (coef).
__device__ __forceinline__ void post_coefs_to_shared(float (*coef)[kCoef + 1], const float* __restrict__ logits,
                                                     int64_t ldl, const float* __restrict__ alpha_post,
                                                     const float* __restrict__ alpha_res,
                                                     const float* __restrict__ b_post,
                                                     const float* __restrict__ b_res, float c, int iters,
                                                     float sk_eps, float* __restrict__ h_post, int64_t ldhp,
                                                     float* __restrict__ h_res, int64_t ldhr, int64_t r0, int64_t t,
                                                     const uint64_t* exp_table) {
  if (threadIdx.x >= kPostTokens || r0 + threadIdx.x >= t) return;
  const int64_t r = r0 + threadIdx.x;
  mhc_post_coefs_store(logits + r * ldl, alpha_post[0] * c, alpha_res[0] * c, b_post, b_res, iters, sk_eps, exp_table,
                       coef[threadIdx.x], h_post != nullptr ? h_post + r * ldhp : nullptr,
                       h_res != nullptr ? h_res + r * ldhr : nullptr);
}

__global__ void __launch_bounds__(kVecWarps * 32, kPostBlocks)
    mhc_post_res_vec_kernel(uint16_t* state, int64_t lds, const uint16_t* __restrict__ o, int64_t ldo,
                            const float* __restrict__ logits, int64_t ldl, const float* __restrict__ alpha_post,
                            const float* __restrict__ alpha_res, const float* __restrict__ b_post,
                            const float* __restrict__ b_res, float c, int iters, float sk_eps,
                            float* __restrict__ h_post, int64_t ldhp, float* __restrict__ h_res, int64_t ldhr,
                            int64_t d, int64_t t) {
  extern __shared__ uint4 post_ring[];  // [slot][load][thread]
  __shared__ float coef[kPostTokens][kCoef + 1];
  __shared__ uint64_t exp_table[32];
  exp2_table_to_shared(exp_table);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kPostTokens;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // This warp's tokens r0 + warp + 8 j, j < ntok; column step ci of a token: columns 8 lane + 256 ci.
  const int64_t left = t - r0 - warp;  // tokens warp + 8 j < left
  const int ntok =
      left <= 0 ? 0 : static_cast<int>(min(int64_t{kPostTokens / kVecWarps}, (left + kVecWarps - 1) / kVecWarps));
  const int steps_tok = static_cast<int>((d + 255) / 256), steps = ntok * steps_tok;
  uint4* mine = post_ring + threadIdx.x;  // slot k, load l: mine[(k * kPostLoads + l) * blockDim.x]
  auto issue = [&](int k) {
    if (k < steps) {
      const int j = k / steps_tok;
      const int64_t r = r0 + warp + kVecWarps * j, col = 8 * lane + 256 * static_cast<int64_t>(k - j * steps_tok);
      if (col < d) {
        uint4* slot = mine + (k % kPostStages) * kPostLoads * kVecWarps * 32;
#pragma unroll
        for (int l = 0; l < kStreams; ++l) cp_async16(slot + l * kVecWarps * 32, state + r * lds + l * d + col);
        cp_async16(slot + kStreams * kVecWarps * 32, o + r * ldo + col);
      }
    }
    cp_async_commit();
  };
#pragma unroll 1
  for (int k = 0; k < kPostStages - 1; ++k) issue(k);
  __syncthreads();  // the exp table
  post_coefs_to_shared(coef, logits, ldl, alpha_post, alpha_res, b_post, b_res, c, iters, sk_eps, h_post, ldhp, h_res,
                       ldhr, r0, t, exp_table);
  __syncthreads();
  float hp[kStreams], m[kStreams][kStreams];
#pragma unroll 1
  for (int k = 0; k < steps; ++k) {
    const int j = k / steps_tok, ci = k - j * steps_tok;
    if (ci == 0) {  // a new token: its coefficients
      const int tok = warp + kVecWarps * j;
#pragma unroll
      for (int i = 0; i < kStreams; ++i) {
        hp[i] = coef[tok][i];
#pragma unroll
        for (int jj = 0; jj < kStreams; ++jj) m[i][jj] = coef[tok][kStreams + 4 * i + jj];
      }
    }
    issue(k + kPostStages - 1);        // refills the slot step k - 1 used
    cp_async_wait<kPostStages - 1>();  // this thread's copies of step k have landed
    const int64_t r = r0 + warp + kVecWarps * j, col = 8 * lane + 256 * static_cast<int64_t>(ci);
    if (col >= d) continue;
    const uint4* slot = mine + (k % kPostStages) * kPostLoads * kVecWarps * 32;
    uint4 x[kStreams];
#pragma unroll
    for (int l = 0; l < kStreams; ++l) x[l] = slot[l * kVecWarps * 32];
    const uint4 ov = slot[kStreams * kVecWarps * 32];
    float acc[kStreams][8];
    post_mix(x, ov, hp, m, acc);
    uint16_t out[kStreams][8];
#pragma unroll
    for (int i = 0; i < kStreams; ++i)
#pragma unroll
      for (int e = 0; e < 8; ++e) out[i][e] = f32_to_bf16(acc[i][e]);
    uint16_t* s = state + r * lds;
#pragma unroll
    for (int i = 0; i < kStreams; ++i) *reinterpret_cast<uint4*>(s + i * d + col) = pack8(out[i]);
  }
  cp_async_wait<0>();
}

// ---- post + residual, the lean kernel ---------------------------------------------
//
// The ring kernel's plan and operations (same bytes), with about 40 % fewer
// instructions per 16-byte column step, which made the ring kernel issue-bound
// between its loads (~620 instructions a step, 250 of them on the half-rate
// integer pipe, for 80 bytes read and 64 written per thread):
// - the 32 sums of a step round to bf16 in pairs with one cvt.rn.bf16x2.f32
//   (the same bits as f32_to_bf16 for every non-NaN value, subnormals
//   included: no .ftz); a NaN becomes the canonical one there, so a step whose
//   sums hold a NaN (their fp32 total is NaN) rounds with f32_to_bf16 instead
//   and keeps the payload;
// - the ring position and the (token, column step) of the next copy are
//   carried from step to step instead of divided out of a flat index;
// - the new state is stored with st.global.cs (evict first: nothing reads it
//   before this kernel ends, so it should not displace the state still to be read).
// kStages and kBlocks size the ring: kStages - 1 steps (80 bytes a thread
// each) ahead, kStages x 20 KB of shared memory a block.

template <int kStages>
constexpr size_t post_lean_shared() {
  return static_cast<size_t>(kStages) * kPostLoads * kVecWarps * 32 * sizeof(uint4);
}

template <int kStages, int kBlocks>
__global__ void __launch_bounds__(kVecWarps * 32, kBlocks)
    mhc_post_res_lean_kernel(uint16_t* state, int64_t lds, const uint16_t* __restrict__ o, int64_t ldo,
                             const float* __restrict__ logits, int64_t ldl, const float* __restrict__ alpha_post,
                             const float* __restrict__ alpha_res, const float* __restrict__ b_post,
                             const float* __restrict__ b_res, float c, int iters, float sk_eps,
                             float* __restrict__ h_post, int64_t ldhp, float* __restrict__ h_res, int64_t ldhr,
                             float* __restrict__ ss, int64_t d, int64_t t) {
  extern __shared__ uint4 post_ring[];  // [slot][load][thread]
  __shared__ float coef[kPostTokens][kCoef + 1];
  __shared__ uint64_t exp_table[32];
  constexpr int kThreads = kVecWarps * 32;
  exp2_table_to_shared(exp_table);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kPostTokens;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // This warp's tokens r0 + warp + 8 j, j < ntok; column step ci of a token: columns 8 lane + 256 ci.
  const int64_t left = t - r0 - warp;  // tokens warp + 8 j < left
  const int ntok =
      left <= 0 ? 0 : static_cast<int>(min(int64_t{kPostTokens / kVecWarps}, (left + kVecWarps - 1) / kVecWarps));
  const int steps_tok = static_cast<int>((d + 255) / 256);
  const int64_t lane_col = 8 * lane;
  uint4* mine = post_ring + threadIdx.x;  // slot k, load l: mine[(k * kPostLoads + l) * kThreads]
  // The next copy: token j of the warp, column step ci, ring slot k (steps issue in order, one commit group each).
  int issue_j = 0, issue_ci = 0, issue_k = 0;
  auto issue = [&] {
    if (issue_j < ntok) {
      const int64_t r = r0 + warp + kVecWarps * issue_j, col = lane_col + 256 * static_cast<int64_t>(issue_ci);
      if (col < d) {
        uint4* slot = mine + issue_k * kPostLoads * kThreads;
        const uint16_t* src = state + r * lds + col;
#pragma unroll
        for (int l = 0; l < kStreams; ++l) cp_async16(slot + l * kThreads, src + l * d);
        cp_async16(slot + kStreams * kThreads, o + r * ldo + col);
      }
      if (++issue_ci == steps_tok) issue_ci = 0, ++issue_j;
      if (++issue_k == kStages) issue_k = 0;
    }
    cp_async_commit();
  };
#pragma unroll 1
  for (int k = 0; k < kStages - 1; ++k) issue();
  __syncthreads();  // the exp table
  post_coefs_to_shared(coef, logits, ldl, alpha_post, alpha_res, b_post, b_res, c, iters, sk_eps, h_post, ldhp, h_res,
                       ldhr, r0, t, exp_table);
  __syncthreads();
  int k = 0;  // ring slot of the current step
#pragma unroll 1
  for (int j = 0; j < ntok; ++j) {
    const int tok = warp + kVecWarps * j;
    float hp[kStreams], m[kStreams][kStreams];
#pragma unroll
    for (int i = 0; i < kStreams; ++i) {
      hp[i] = coef[tok][i];
#pragma unroll
      for (int jj = 0; jj < kStreams; ++jj) m[i][jj] = coef[tok][kStreams + 4 * i + jj];
    }
    uint16_t* srow = state + (r0 + tok) * lds;
    float sq = 0.f;  // with ss: this lane's share of the new row's sum of squares
#pragma unroll 1
    for (int ci = 0; ci < steps_tok; ++ci) {
      issue();                       // refills the slot the previous step used
      cp_async_wait<kStages - 1>();  // this thread's copies of this step have landed
      const uint4* slot = mine + k * kPostLoads * kThreads;
      if (++k == kStages) k = 0;
      const int64_t col = lane_col + 256 * static_cast<int64_t>(ci);
      if (col >= d) continue;
      uint4 x[kStreams];
#pragma unroll
      for (int l = 0; l < kStreams; ++l) x[l] = slot[l * kThreads];
      const uint4 ov = slot[kStreams * kThreads];
      float acc[kStreams][8];
      post_mix(x, ov, hp, m, acc);
      uint4 out[kStreams];
      post_round(acc, out);
#pragma unroll
      for (int i = 0; i < kStreams; ++i) st_global_cs(srow + i * d + col, out[i]);
      if (ss != nullptr) post_add_squares(sq, out);
    }
    if (ss != nullptr) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
      if (lane == 0) ss[r0 + tok] = sq;
    }
  }
  cp_async_wait<0>();
}

// Launches the lean kernel (kStages x 20 KB of shared memory a block, the
// largest carveout so that kBlocks blocks fit an SM).
template <int kStages, int kBlocks>
void launch_post_lean(unsigned grid, cudaStream_t s, uint16_t* state, int64_t lds, const uint16_t* o, int64_t ldo,
                      const float* logits, int64_t ldl, const float* alpha_post, const float* alpha_res,
                      const float* b_post, const float* b_res, float c, int iters, float sk_eps, float* h_post,
                      int64_t ldhp, float* h_res, int64_t ldhr, float* ss, int64_t d, int64_t t) {
  constexpr auto kernel = mhc_post_res_lean_kernel<kStages, kBlocks>;
  constexpr size_t shared = post_lean_shared<kStages>();
  static const bool opted_in = opt_in_shared(reinterpret_cast<const void*>(kernel), shared);
  (void)opted_in;
  kernel<<<grid, kVecWarps * 32, shared, s>>>(state, lds, o, ldo, logits, ldl, alpha_post, alpha_res, b_post, b_res, c,
                                              iters, sk_eps, h_post, ldhp, h_res, ldhr, ss, d, t);
}

// ---- the logits as one GEMM (mhc_logits_gemm.cpp) --------------------------------

// Thread per (group m, k): the 24 values (w_m[k] + 1) * phi[k][n], split in
// three bf16 terms (split3_bf16), into rows s * 24 + n of group m's [72, vw] block.
__global__ void mhc_split72_kernel(const float* __restrict__ phi, const float* __restrict__ w, int64_t vw, int groups,
                                   uint16_t* __restrict__ out) {
  const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= groups * vw) return;
  const int64_t m = u / vw, k = u - m * vw;
  const float wk = w[m * vw + k] + 1.0f;
  uint16_t* blk = out + m * kSplits * kLogits * vw + k;
  for (int n = 0; n < kLogits; ++n) {
    uint16_t part[kSplits];
    split3_bf16(phi[k * kLogits + n] * wk, part);
#pragma unroll
    for (int sp = 0; sp < kSplits; ++sp) blk[(sp * kLogits + n) * vw] = part[sp];
  }
}

// Thread per (token, logit): the three split terms' fp32 sums added (hi + mid,
// then + lo), times 1 / sqrt(ss / vw + eps) (lg_finish's factor).
__global__ void mhc_logits_from_split72_kernel(const float* __restrict__ y72, const float* __restrict__ ss, int64_t vw,
                                               float eps, float* __restrict__ logits, int64_t ldl, int64_t t) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= t * kLogits) return;
  const int64_t r = e / kLogits;
  const int n = static_cast<int>(e - r * kLogits);
  const float* y = y72 + r * kSplits * kLogits;
  const float l = (y[n] + y[kLogits + n]) + y[2 * kLogits + n];
  const float rs = 1.0f / sqrtf(ss[r] * (1.0f / static_cast<float>(vw)) + eps);
  logits[r * ldl + n] = l * rs;
}

}  // namespace

bool mhc_logits_fused(const MhcLogitsParams& p, SplitScratch& scratch, cudaStream_t s) {
  const int64_t t = p.state.size(0), vw = p.state.size(1);
  if (vw % kChunkK != 0 || !rows_aligned16(p.state)) return false;
  if (t == 0) return true;
  const int groups = p.groups.count;
  auto* split = static_cast<uint4*>(scratch.get(mhc_phi_split_bytes(vw, groups), s, "mhc_logits (fused)"));
  mhc_phi_split(static_cast<const float*>(p.phi.data()), static_cast<const float*>(p.norm_w.data()), vw, groups, split,
                s);
  const auto* x = static_cast<const uint16_t*>(p.state.data());
  auto* out = static_cast<float*>(p.logits.data());
  // 3 slots (96 KB), two blocks an SM: 2 x 4 KB ahead per warp, 128 KB an SM.
  // Measured on the H200 (docs/perf.md, 2026-12-04 third and fourth sessions):
  // 0.40 ms at 272p against 0.58 ms for 16-byte loads straight into registers,
  // 0.42 ms for 6 slots and one block an SM, and 0.48 ms for 128-token blocks
  // of 24 warps sharing each weight unit (all three removed).
  launch_logits_ring<3, 2>(launch_blocks(t, kLgTokens, "mhc_logits (fused)"), s, x, p.state.row_stride(), split, out,
                           p.logits.row_stride(), vw, cu_of(p.groups), groups, p.eps, t);
  MAGI2_CUDA_CHECK_LAUNCH("mhc_logits (fused)");
  return true;
}

bool mhc_post_res_fused(const MhcPostResParams& p, cudaStream_t s, MhcPostKernel kernel) {
  const int64_t t = p.state.size(0), d = p.state.size(1) / kStreams;
  if (d % 8 != 0 || !rows_aligned16(p.state) || !rows_aligned16(p.o)) return false;
  if (t == 0) return true;
  const unsigned grid = launch_blocks(t, kPostTokens, "mhc_post_res (fused)");
  auto* state = static_cast<uint16_t*>(p.state.data());
  const auto* o = static_cast<const uint16_t*>(p.o.data());
  const auto* logits = static_cast<const float*>(p.logits.data());
  const auto* alpha_post = static_cast<const float*>(p.w->alpha_post.data());
  const auto* alpha_res = static_cast<const float*>(p.w->alpha_res.data());
  const auto* b_post = static_cast<const float*>(p.w->bias_post.data());
  const auto* b_res = static_cast<const float*>(p.w->bias_res.data());
  float* h_post = p.h_post.defined() ? static_cast<float*>(p.h_post.data()) : nullptr;
  float* h_res = p.h_res.defined() ? static_cast<float*>(p.h_res.data()) : nullptr;
  const int64_t ldhp = p.h_post.defined() ? p.h_post.row_stride() : 0,
                ldhr = p.h_res.defined() ? p.h_res.row_stride() : 0;
  switch (kernel) {
    case MhcPostKernel::kLean:
      launch_post_lean<3, 3>(grid, s, state, p.state.row_stride(), o, p.o.row_stride(), logits, p.logits.row_stride(),
                             alpha_post, alpha_res, b_post, b_res, p.c, p.sinkhorn_iters, p.sinkhorn_eps, h_post, ldhp,
                             h_res, ldhr, p.ss.defined() ? static_cast<float*>(p.ss.data()) : nullptr, d, t);
      break;
    case MhcPostKernel::kRing: {
      static const bool opted_in =
          opt_in_shared(reinterpret_cast<const void*>(mhc_post_res_vec_kernel), kPostShared);
      (void)opted_in;
      mhc_post_res_vec_kernel<<<grid, kVecWarps * 32, kPostShared, s>>>(
          state, p.state.row_stride(), o, p.o.row_stride(), logits, p.logits.row_stride(), alpha_post, alpha_res,
          b_post, b_res, p.c, p.sinkhorn_iters, p.sinkhorn_eps, h_post, ldhp, h_res, ldhr, d, t);
      break;
    }
  }
  MAGI2_CUDA_CHECK_LAUNCH("mhc_post_res (fused)");
  return true;
}

size_t mhc_phi_split_bytes(int64_t vw, int groups) {
  return static_cast<size_t>(groups * (vw / kChunkK) * kLogitTiles * 32) * kSplits * sizeof(uint4);
}

void mhc_phi_split(const float* phi, const float* norm_w, int64_t vw, int groups, uint4* out, cudaStream_t s) {
  const int64_t units = groups * (vw / kChunkK) * kLogitTiles * 32;
  if (units == 0) return;
  mhc_phi_split_kernel<<<launch_blocks(units, 256, "mhc_logits phi split"), 256, 0, s>>>(phi, norm_w, vw, groups, out);
  MAGI2_CUDA_CHECK_LAUNCH("mhc_logits phi split");
}

void mhc_split72(const float* phi, const float* norm_w, int64_t vw, int groups, uint16_t* out, cudaStream_t s) {
  const int64_t n = groups * vw;
  if (n == 0) return;
  mhc_split72_kernel<<<launch_blocks(n, 256, "mhc_logits (GEMM) split"), 256, 0, s>>>(phi, norm_w, vw, groups, out);
  MAGI2_CUDA_CHECK_LAUNCH("mhc_logits (GEMM) split");
}

void mhc_logits_from_split72(const float* y72, const float* ss, int64_t vw, float eps, float* logits, int64_t ldl,
                             int64_t t, cudaStream_t s) {
  const int64_t n = t * kLogits;
  if (n == 0) return;
  mhc_logits_from_split72_kernel<<<launch_blocks(n, 256, "mhc_logits (GEMM) finish"), 256, 0, s>>>(y72, ss, vw, eps, logits,
                                                                                           ldl, t);
  MAGI2_CUDA_CHECK_LAUNCH("mhc_logits (GEMM) finish");
}

}  // namespace magi2::cuda
