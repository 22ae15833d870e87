// mHC post + residual with the next branch's logits in the same pass
// (MhcPostResParams::next, fused_kernels.h mhc_post_logits_fused; spec
// magi2-dit.md §9.2 and §9.4-9.6). Why: the post + residual writes the new
// state and the next branch's logits then read all of it back (734 MB a
// boundary at 272p); here the logits' products run on the new rows while they
// are still in registers, so a boundary reads the state once less.
//
// Four launches:
// 1. coefficients: a thread per token forms H_post and the Sinkhorn H_res
//    (mhc_coef.cuh, the reference's operations) into a [T, 20] scratch (and
//    h_post / h_res when given);
// 2. the weight split (mhc_phi_split: the fused logits kernel's
//    fragment-native units of (w_m + 1) phi, three bf16 terms);
// 3. the pass: a block of 8 warps takes 128 tokens of one weight group (tiles
//    start at each group's first row, so a block has one weight group) and one
//    of `parts` column ranges of D (post_parts). Warp w takes tokens 16 w + {g, g + 8} of the
//    tile (lane = 4 g + c); per 32-column step each lane reads its two rows'
//    columns 8 c .. 8 c + 7 of the four streams and of o, forms the new values
//    (mhc_post.cuh: the lean post kernel's operations, same bytes), stores
//    them, adds their squares, and runs the four streams' 32-k chunks of the
//    logits on mma.sync with the new rows as the A operand: a lane's 8
//    contiguous values of rows g and g + 8 are its fragment in the k order of
//    mma_split.cuh; each chunk's split terms go to a zeroed accumulator and
//    then one IEEE add into the running sums. The weight units of a step (18 KB: 4 streams x 3 splits x
//    3 n-tiles x 32 lanes) are shared by the block's warps through shared
//    memory. State and o come through a per-thread cp.async ring, the units
//    through a block ring, kStages steps deep (one barrier a step).
//    Each (part, token) writes its partial logits and sum of squares;
// 4. the finish: a thread per (token, logit) adds the parts' partials in part
//    order and applies the RMSNorm factor 1 / sqrt(ss / vw + eps).
// Every sum of a token runs in an order fixed by D (and the part count): the
// logits do not change with T or with the token's place in a tile. The same
// pass without the update (mhc_logits_pass) serves the fast path's mhc_logits,
// so a state's logits have the same bytes whichever op forms them.
#include <cstdint>

#include "cuda/cp_async.cuh"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/env_choice.h"
#include "cuda/fused_kernels.h"
#include "cuda/mhc_coef.cuh"
#include "cuda/mhc_post.cuh"
#include "cuda/mma_split.cuh"

namespace magi2::cuda {

namespace {

using namespace dev;

constexpr int kStreams = kMhcStreams;
constexpr int kLogits = 24;
constexpr int kLogitTiles = kLogits / 8;                // n-tiles of mma.m16n8k16
constexpr int kCoef = kStreams + kStreams * kStreams;  // H_post, H_res
constexpr int kCoefLd = kCoef + 1;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 16 * kWarps;  // tokens a block
// Column ranges of D a tile is split into (blocks = tiles x parts, one resident an SM): 4 (~7 waves at
// 272p) by default, 8 (~14, half as long each) with MAGI2_MHC_POST_PARTS=8 where D allows (a measurement
// knob: the count fixes each token's summation order, so it is chosen once per process).
int post_parts(int64_t d) {
  static const int knob = env_choice("MAGI2_MHC_POST_PARTS", {"4", "8"});
  const int want = knob == 1 ? 8 : 4;
  return d % (kChunkK * want) == 0 ? want : 4;
}
constexpr int kStages = 3;          // two steps (2 x 58 KB a block) in flight under the current one
constexpr int kLoads = kStreams + 1;                           // a row's loads a step: the 4 streams and o
constexpr int kUnitsStream = kSplits * kLogitTiles * 32;       // a stream's weight units a step (288)
constexpr int kUnitsStep = kStreams * kUnitsStream;            // 1,152 x 16 bytes
constexpr size_t kShared = (static_cast<size_t>(kStages) * (kUnitsStep + 2 * kLoads * kThreads)) * sizeof(uint4) +
                           static_cast<size_t>(kTile) * kCoefLd * sizeof(float);
static_assert(kShared <= 227 * 1024, "one block an SM");

// Tile `tile` of the group-aligned tiling: its weight group m and rows [r0, r1); false past the last.
__device__ __forceinline__ bool group_tile(int tile, int4 cu, int groups, int& m, int64_t& r0, int64_t& r1) {
  const auto bound = [cu](int g) { return g == 0 ? cu.x : g == 1 ? cu.y : g == 2 ? cu.z : cu.w; };  // no local array
  int first = 0;
  for (int g = 0; g < groups; ++g) {
    const int lo = bound(g), hi = bound(g + 1), n = (hi - lo + kTile - 1) / kTile;
    if (tile - first < n) {
      m = g;
      r0 = lo + static_cast<int64_t>(tile - first) * kTile;
      r1 = r0 + kTile < hi ? r0 + kTile : hi;
      return true;
    }
    first += n;
  }
  return false;
}

int group_tiles(const Groups& g) {
  int64_t n = 0;
  for (int m = 0; m < g.count; ++m) n += (g.cu[m + 1] - g.cu[m] + kTile - 1) / kTile;
  return static_cast<int>(n);
}

// A thread per token: H_post and H_res (mhc_post_coefs with the shared-memory
// exp table) into coef [T, 20] and, when given, h_post and h_res.
__global__ void __launch_bounds__(128)
    mhc_coef_kernel(const float* __restrict__ logits, int64_t ldl, const float* __restrict__ alpha_post,
                    const float* __restrict__ alpha_res, const float* __restrict__ b_post,
                    const float* __restrict__ b_res, float c, int iters, float sk_eps, float* __restrict__ coef,
                    float* __restrict__ h_post, int64_t ldhp, float* __restrict__ h_res, int64_t ldhr, int64_t t) {
  __shared__ uint64_t exp_table[32];
  exp2_table_to_shared(exp_table);
  __syncthreads();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= t) return;
  mhc_post_coefs_store(logits + r * ldl, alpha_post[0] * c, alpha_res[0] * c, b_post, b_res, iters, sk_eps, exp_table,
                       coef + r * kCoef, h_post != nullptr ? h_post + r * ldhp : nullptr,
                       h_res != nullptr ? h_res + r * ldhr : nullptr);
}

// Forms of the pass (the same bytes): kPf the L2 prefetch size of the state
// and o copies (128, the default: the L2 fetches a row-stream's next step with
// the first, since a step reads 64 bytes of each row-stream; the pass 0.93 ->
// 0.78 ms a boundary at 272p, H100, docs/perf.md; 0: none; 256: the next three
// steps, 0.83 ms), chosen by MAGI2_MHC_PASS_PREFETCH (pass_prefetch). The
// twenty-first to twenty-third sessions also measured plain stores of the new
// rows (slower than evict-first) and a form without the logits' products (a
// diagnostic with wrong logits); both were dropped once measured.

// The pass (file comment, 3). split: the weight units of all groups; part_l
// [parts, T, 24] and part_ss [parts, T] take the partial sums. kUpdate false:
// the logits of the state as it is (mhc_logits_pass): o and coef unused,
// nothing stored, the same products and sums in the same order, so a state
// that the update wrote gets the same logits' bytes from either form.
template <bool kUpdate, int kPf>
__global__ void __launch_bounds__(kThreads, 1)
    mhc_post_logits_kernel(uint16_t* state, int64_t lds, const uint16_t* __restrict__ o, int64_t ldo,
                           const float* __restrict__ coef, const uint4* __restrict__ split, int64_t d, int4 cu,
                           int groups, int parts, float* __restrict__ part_l, float* __restrict__ part_ss, int64_t t) {
  extern __shared__ uint4 smem[];
  uint4* wring = smem;                                  // [stage][stream][split][n-tile][lane]
  uint4* ring = smem + kStages * kUnitsStep;            // [stage][row load][thread]
  auto* cf = reinterpret_cast<float*>(ring + kStages * 2 * kLoads * kThreads);  // [token][kCoefLd]
  int m = 0;
  int64_t r0 = 0, r1 = 0;
  if (!group_tile(static_cast<int>(blockIdx.x), cu, groups, m, r0, r1)) return;
  const int part = static_cast<int>(blockIdx.y);
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  const int64_t qs = d / kChunkK;                   // 32-column chunks of a stream
  const int steps = static_cast<int>(qs / parts);  // this part's chunks: q0 .. q0 + steps - 1 of each stream
  const int64_t q0 = static_cast<int64_t>(part) * steps;
  const int tok[2] = {16 * warp + g, 16 * warp + g + 8};  // the lane's rows within the tile
  const bool live[2] = {r0 + tok[0] < r1, r0 + tok[1] < r1};
  const uint4* wsrc = split + static_cast<int64_t>(m) * 4 * qs * kUnitsStream;  // group m; chunk q at q * 288
  uint4* mine = ring + tid;  // stage st, load l of row h: mine[(st * 2 * kLoads + h * kLoads + l) * kThreads]

  // Step j's copies into stage j % kStages (rows past the tile are not read:
  // their slots hold stale values whose results are neither stored nor mixed
  // into live rows, since an mma's output rows depend only on their A rows),
  // then one commit group, empty or not.
  auto issue = [&](int j) {
    if (j < steps) {
      const int st = j % kStages;
      const int64_t col = (q0 + j) * kChunkK + 8 * c;
      uint4* slot = mine + st * 2 * kLoads * kThreads;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (live[h]) {
          const uint16_t* src = state + (r0 + tok[h]) * lds + col;
#pragma unroll
          for (int l = 0; l < kStreams; ++l) cp_async16_prefetch<kPf>(slot + (h * kLoads + l) * kThreads, src + l * d);
          if (kUpdate)
            cp_async16_prefetch<kPf>(slot + (h * kLoads + kStreams) * kThreads, o + (r0 + tok[h]) * ldo + col);
        }
      uint4* wdst = wring + st * kUnitsStep;
      for (int u = tid; u < kUnitsStep; u += kThreads) {
        const int i = u / kUnitsStream;
        cp_async16(wdst + u, wsrc + (i * qs + q0 + j) * kUnitsStream + (u - i * kUnitsStream));
      }
    }
    cp_async_commit();
  };
#pragma unroll 1
  for (int j = 0; j < kStages - 1; ++j) issue(j);
  if (kUpdate)
    for (int e = tid; e < kTile * kCoef; e += kThreads) {
      const int k = e / kCoef, f = e - k * kCoef;
      cf[k * kCoefLd + f] = r0 + k < r1 ? coef[(r0 + k) * kCoef + f] : 0.f;
    }
  __syncthreads();
  float hp[2][kStreams] = {}, mx[2][kStreams][kStreams] = {};
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < kStreams && kUpdate; ++i) {
      hp[h][i] = cf[tok[h] * kCoefLd + i];
#pragma unroll
      for (int jj = 0; jj < kStreams; ++jj) mx[h][i][jj] = cf[tok[h] * kCoefLd + kStreams + 4 * i + jj];
    }

  float acc[kLogitTiles][4] = {};
  float sq[2] = {0.f, 0.f};
#pragma unroll 1
  for (int j = 0; j < steps; ++j) {
    cp_async_wait<kStages - 2>();  // this thread's copies of step j have landed
    __syncthreads();               // and every thread's: the step's units; stage (j - 1) % kStages is free
    issue(j + kStages - 1);
    const int st = j % kStages;
    const uint4* slot = mine + st * 2 * kLoads * kThreads;
    const int64_t col = (q0 + j) * kChunkK + 8 * c;
    uint4 nw[2][kStreams];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint4 x[kStreams];
#pragma unroll
      for (int l = 0; l < kStreams; ++l) x[l] = slot[(h * kLoads + l) * kThreads];
      if constexpr (kUpdate) {
        float a[kStreams][8];
        post_mix(x, slot[(h * kLoads + kStreams) * kThreads], hp[h], mx[h], a);
        post_round(a, nw[h]);
        if (live[h]) {
          uint16_t* dst = state + (r0 + tok[h]) * lds + col;
#pragma unroll
          for (int i = 0; i < kStreams; ++i) st_global_cs(dst + i * d, nw[h][i]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < kStreams; ++i) nw[h][i] = x[i];
      }
      post_add_squares(sq[h], nw[h]);
    }
    // Each stream's 32-k chunk: its three split terms on a zeroed accumulator, then one IEEE add into the
    // running sums (as the fused logits kernel: the tensor core's truncating alignment sees 96-term sums).
    const uint4* w = wring + st * kUnitsStep + lane;
#pragma unroll
    for (int i = 0; i < kStreams; ++i) {
      float part[kLogitTiles][4] = {};
#pragma unroll
      for (int s = 0; s < kSplits; ++s)
#pragma unroll
        for (int nt = 0; nt < kLogitTiles; ++nt)
          mma_chunk(part[nt], nw[0][i], nw[1][i], w[((i * kSplits + s) * kLogitTiles + nt) * 32]);
#pragma unroll
      for (int nt = 0; nt < kLogitTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nt][e] += part[nt][e];
    }
  }
  cp_async_wait<0>();

  // C fragment of n-tile nt: c0, c1 row g, columns 8 nt + 2 c + {0, 1}; c2, c3 row g + 8.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float v = sq[h];
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    if (!live[h]) continue;
    const int64_t r = r0 + tok[h];
    float* pl = part_l + (static_cast<int64_t>(part) * t + r) * kLogits;
#pragma unroll
    for (int nt = 0; nt < kLogitTiles; ++nt)
      *reinterpret_cast<float2*>(pl + 8 * nt + 2 * c) = make_float2(acc[nt][2 * h], acc[nt][2 * h + 1]);
    if (c == 0) part_ss[static_cast<int64_t>(part) * t + r] = v;
  }
}

// The finish (file comment, 4): a thread per (token, logit); ss (optional) takes the rows' sums of squares.
__global__ void mhc_post_logits_finish_kernel(const float* __restrict__ part_l, const float* __restrict__ part_ss,
                                              int parts, int64_t vw, float eps, float* __restrict__ logits,
                                              int64_t ldl, float* __restrict__ ss, int64_t t) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= t * kLogits) return;
  const int64_t r = e / kLogits;
  const int n = static_cast<int>(e - r * kLogits);
  float l = part_l[r * kLogits + n], s2 = part_ss[r];
#pragma unroll 1
  for (int p = 1; p < parts; ++p) {
    l += part_l[(p * t + r) * kLogits + n];
    s2 += part_ss[p * t + r];
  }
  logits[r * ldl + n] = l * (1.0f / sqrtf(s2 * (1.0f / static_cast<float>(vw)) + eps));
  if (ss != nullptr && n == 0) ss[r] = s2;
}

}  // namespace

namespace {

// The pass and the finish of either form on checked shapes: `update` (kUpdate)
// with p's o and coefficients, else the logits of state as it is. Scratch:
// the weight units, coef [T, 20] (update only), part_l [parts, T, 24], part_ss [parts, T].
struct PassArgs {
  uint16_t* state;
  int64_t lds;
  const uint16_t* o = nullptr;
  int64_t ldo = 0;
  const MhcLogitsParams* next;  // norm_w, phi, logits, groups, eps
  float* ss = nullptr;          // optional: the rows' sums of squares
};

// The L2 prefetch size of this process's pass (MAGI2_MHC_PASS_PREFETCH, read once).
int pass_prefetch() {
  static const int pf = [] {
    const int c = env_choice("MAGI2_MHC_PASS_PREFETCH", {"128", "none", "256"});
    return c == 1 ? 0 : c == 2 ? 256 : 128;  // unset: 128
  }();
  return pf;
}

// Launches one form with kShared bytes of dynamic shared memory (opted in once per form).
template <bool kUpdate, int kPf, class... Args>
void launch_form(dim3 grid, cudaStream_t s, Args... args) {
  constexpr auto kernel = mhc_post_logits_kernel<kUpdate, kPf>;
  static const bool opted_in = [&] {
    MAGI2_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kShared)));
    return true;
  }();
  (void)opted_in;
  kernel<<<grid, kThreads, kShared, s>>>(args...);
}

// kUpdate's form with this process's prefetch size.
template <bool kUpdate, class... Args>
void launch_pass(dim3 grid, cudaStream_t s, Args... args) {
  const int pf = pass_prefetch();
  if (pf == 128)
    launch_form<kUpdate, 128>(grid, s, args...);
  else if (pf == 256)
    launch_form<kUpdate, 256>(grid, s, args...);
  else
    launch_form<kUpdate, 0>(grid, s, args...);
}

void run_pass(const PassArgs& a, int64_t t, int64_t vw, SplitScratch& scratch, cudaStream_t s,
              const MhcPostResParams* update) {
  const int64_t d = vw / kStreams;
  const int parts = post_parts(d);
  const MhcLogitsParams& n = *a.next;
  const int groups = n.groups.count;
  const size_t w_bytes = (mhc_phi_split_bytes(vw, groups) + 255) / 256 * 256;
  const size_t coef_bytes = update ? (static_cast<size_t>(t) * kCoef * sizeof(float) + 255) / 256 * 256 : 0;
  const size_t pl_bytes = static_cast<size_t>(parts) * t * kLogits * sizeof(float);
  auto* buf = static_cast<char*>(scratch.get(w_bytes + coef_bytes + pl_bytes + static_cast<size_t>(parts) * t * 4, s,
                                             update ? "mhc_post_res (with the next logits)" : "mhc_logits (pass)"));
  auto* split = reinterpret_cast<uint4*>(buf);
  auto* coef = reinterpret_cast<float*>(buf + w_bytes);
  auto* part_l = reinterpret_cast<float*>(buf + w_bytes + coef_bytes);
  auto* part_ss = part_l + static_cast<size_t>(parts) * t * kLogits;
  if (update != nullptr) {
    const MhcPostResParams& p = *update;
    float* h_post = p.h_post.defined() ? static_cast<float*>(p.h_post.data()) : nullptr;
    float* h_res = p.h_res.defined() ? static_cast<float*>(p.h_res.data()) : nullptr;
    mhc_coef_kernel<<<launch_blocks(t, 128, "mhc_post_res coefficients"), 128, 0, s>>>(
        static_cast<const float*>(p.logits.data()), p.logits.row_stride(),
        static_cast<const float*>(p.w->alpha_post.data()), static_cast<const float*>(p.w->alpha_res.data()),
        static_cast<const float*>(p.w->bias_post.data()), static_cast<const float*>(p.w->bias_res.data()), p.c,
        p.sinkhorn_iters, p.sinkhorn_eps, coef, h_post, p.h_post.defined() ? p.h_post.row_stride() : 0, h_res,
        p.h_res.defined() ? p.h_res.row_stride() : 0, t);
    MAGI2_CUDA_CHECK_LAUNCH("mhc_post_res coefficients");
  }
  mhc_phi_split(static_cast<const float*>(n.phi.data()), static_cast<const float*>(n.norm_w.data()), vw, groups, split,
                s);
  const dim3 grid(static_cast<unsigned>(group_tiles(n.groups)), static_cast<unsigned>(parts));
  if (update != nullptr)
    launch_pass<true>(grid, s, a.state, a.lds, a.o, a.ldo, coef, split, d, cu_of(n.groups), groups, parts, part_l,
                      part_ss, t);
  else
    launch_pass<false>(grid, s, a.state, a.lds, a.o, a.ldo, coef, split, d, cu_of(n.groups), groups, parts, part_l,
                       part_ss, t);
  MAGI2_CUDA_CHECK_LAUNCH(update ? "mhc_post_res (with the next logits)" : "mhc_logits (pass)");
  mhc_post_logits_finish_kernel<<<launch_blocks(t * kLogits, 256, "mhc logits finish"), 256, 0, s>>>(
      part_l, part_ss, parts, vw, n.eps, static_cast<float*>(n.logits.data()), n.logits.row_stride(), a.ss, t);
  MAGI2_CUDA_CHECK_LAUNCH("mhc logits finish");
}

}  // namespace

bool mhc_post_logits_fused(const MhcPostResParams& p, SplitScratch& scratch, cudaStream_t s) {
  const int64_t t = p.state.size(0), vw = p.state.size(1), d = vw / kStreams;
  if (d % (kChunkK * 4) != 0 || !rows_aligned16(p.state) || !rows_aligned16(p.o)) return false;
  if (t == 0) return true;
  run_pass({.state = static_cast<uint16_t*>(p.state.data()), .lds = p.state.row_stride(),
            .o = static_cast<const uint16_t*>(p.o.data()), .ldo = p.o.row_stride(), .next = &p.next,
            .ss = p.ss.defined() ? static_cast<float*>(p.ss.data()) : nullptr},
           t, vw, scratch, s, &p);
  return true;
}

bool mhc_logits_pass(const MhcLogitsParams& p, SplitScratch& scratch, cudaStream_t s) {
  const int64_t t = p.state.size(0), vw = p.state.size(1), d = vw / kStreams;
  if (vw % kStreams != 0 || d % (kChunkK * 4) != 0 || !rows_aligned16(p.state)) return false;
  if (t == 0) return true;
  // The kernel only reads the state in this form.
  run_pass({.state = const_cast<uint16_t*>(static_cast<const uint16_t*>(p.state.data())), .lds = p.state.row_stride(),
            .next = &p},
           t, vw, scratch, s, nullptr);
  return true;
}

}  // namespace magi2::cuda
