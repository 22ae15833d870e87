// Routed experts (spec magi2-dit.md §8.3-8.4): a counting sort of the routes
// into flat-expert order, then by default the fused expert kernel
// (moe_expert_fused.h: gather, W13, SwiGLU7, W2 and the routing weight in one
// kernel); where it does not apply, a gather of the routed rows, the W13
// grouped GEMMs (the up GEMM, then the gate GEMM with SwiGLU7 in its epilogue;
// or, for reference, gate and up in one GEMM and SwiGLU7 in place) and the W2
// grouped GEMM (with the routing weight in its epilogue, bf16 out; else fp32
// out); last the deterministic combine. Everything stays on the device
// (no host sync), so a planned call is capturable into a CUDA graph.
//
// Order and determinism: expert f's rows are its routes (t, j) in ascending
// token then slot (the official CSR order), built without order-changing
// atomics: per chunk of kChunk routes of one head, a histogram (integer
// counts), an exclusive scan over chunks and over experts, then each route's
// rank among the earlier routes of its chunk with the same expert. The combine
// sums a (token, head)'s routes in ascending (expert id, slot) with fp32
// accumulation and one bf16 rounding, as the CPU reference. It differs from
// the reference only in the GEMM's fp32 summation order and in G/U being
// rounded to bf16 before SwiGLU7, whose sigmoid runs on the SFU (the tests
// bound it by bf16 tolerances).
// FP8 banks with fp8_compute = W8A8 (moe_w8a8.h) are read K-major: held so
// since the load (ExpertBankLayout::KMajorW8a8, Backend::moe_prepare_banks),
// or transposed once per call before the passes; after each pass's sort come the
// quantising scatter and the FP8 fused kernel, with the fused kernel's plan and
// weighted combine.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cuda/block_scan.cuh"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/env_choice.h"
#include "cuda/fp8_quant.cuh"
#include "cuda/fused_kernels.h"
#include "cuda/mhc_moe.h"
#include "cuda/moe_expert_fused.h"
#include "cuda/moe_fp8_dequant.h"
#include "cuda/linear_fp8.h"
#include "cuda/moe_gemm.h"
#include "cuda/moe_w8a8.h"
#include "ops/numerics.h"

namespace magi2::cuda {

namespace {

using namespace dev;

constexpr int kChunk = 256;  // routes per sort chunk = threads per sort block
constexpr int kScanThreads = 1024;
constexpr int kMaxK = 32;

// Grid (chunks, MH): integer histogram of one chunk of head h's routes. Head
// h's routes start at idx + h * hs (hs >= routes: a token range of [MH, T, K]).
__global__ void route_hist(const int32_t* __restrict__ idx, int64_t hs, int64_t routes, int ne, int chunks,
                           int32_t* __restrict__ cnt) {
  extern __shared__ int hist[];
  const int h = blockIdx.y, c = blockIdx.x;
  for (int e = threadIdx.x; e < ne; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int64_t i = static_cast<int64_t>(c) * kChunk + threadIdx.x;
  if (i < routes) {
    const int e = idx[h * hs + i];
    if (e >= 0 && e < ne) atomicAdd(&hist[e], 1);  // integer counts: order-independent
  }
  __syncthreads();
  for (int e = threadIdx.x; e < ne; e += blockDim.x) cnt[(static_cast<int64_t>(h) * chunks + c) * ne + e] = hist[e];
}

// One thread per flat expert f = h * ne + e: exclusive scan of its chunk counts
// in place (chunk order = route order), total[f] = its route count.
__global__ void route_chunk_scan(int32_t* __restrict__ cnt, int mh, int ne, int chunks, int32_t* __restrict__ total) {
  const int f = blockIdx.x * blockDim.x + threadIdx.x;
  if (f >= mh * ne) return;
  const int h = f / ne, e = f % ne;
  int32_t run = 0;
  for (int c = 0; c < chunks; ++c) {
    int32_t* p = cnt + (static_cast<int64_t>(h) * chunks + c) * ne + e;
    const int32_t v = *p;
    *p = run;
    run += v;
  }
  total[f] = run;
}

// One block: offsets[f] = sum of total[0 .. f), offsets[F] = all routes.
__global__ void route_expert_scan(const int32_t* __restrict__ total, int nf, int32_t* __restrict__ offsets) {
  block_exclusive_scan<kScanThreads>(nf, [total](int i) { return total[i]; }, offsets);
}

// Grid (chunks, MH), kChunk threads: each route's row in expert order (-1 for an
// expert index outside [0, ne)), and the source row (token * MH + head) of each
// row; with `wrow` also each row's routing weight (W2's row-scale epilogue).
__global__ void route_scatter(const int32_t* __restrict__ idx, int64_t hs, int64_t routes, int k, int mh, int ne,
                              int chunks,
                              const int32_t* __restrict__ cnt, const int32_t* __restrict__ offsets,
                              int32_t* __restrict__ pos, int32_t* __restrict__ src,
                              const float* __restrict__ weight, float* __restrict__ wrow) {
  __shared__ int32_t ex[kChunk];
  const int h = blockIdx.y, c = blockIdx.x;
  const int64_t i = static_cast<int64_t>(c) * kChunk + threadIdx.x;
  const int e = i < routes ? idx[h * hs + i] : -1;
  ex[threadIdx.x] = e;
  __syncthreads();
  if (i >= routes) return;
  if (e < 0 || e >= ne) {
    pos[h * routes + i] = -1;
    return;
  }
  int rank = 0;
  for (int q = 0; q < static_cast<int>(threadIdx.x); ++q) rank += ex[q] == e;
  const int32_t p = offsets[h * ne + e] + cnt[(static_cast<int64_t>(h) * chunks + c) * ne + e] + rank;
  pos[h * routes + i] = p;
  src[p] = static_cast<int32_t>((i / k) * mh + h);
  if (wrow != nullptr) wrow[p] = weight[h * hs + i];
}

// One warp per expert-ordered row: xp[p] = r[token, head * dh ..] (dh bf16).
__global__ void route_gather(const uint16_t* __restrict__ r, int64_t ldr, int mh, int64_t dh,
                             const int32_t* __restrict__ src, const int32_t* __restrict__ offsets, int nf,
                             int64_t max_rows, uint16_t* __restrict__ xp, bool vec) {
  const int64_t p = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (p >= max_rows || p >= offsets[nf]) return;
  const int64_t s = src[p], n = s / mh, h = s % mh;
  const uint16_t* from = r + n * ldr + h * dh;
  uint16_t* to = xp + p * dh;
  if (vec) {
    for (int64_t d = lane * 8; d < dh; d += 32 * 8)
      *reinterpret_cast<uint4*>(to + d) = *reinterpret_cast<const uint4*>(from + d);
  } else {
    for (int64_t d = lane; d < dh; d += 32) to[d] = from[d];
  }
}

// SwiGLU7 (spec §8.3) in place: h[p, c] = bf16(swiglu7(h[p, c], h[p, de + c])),
// 8 columns a thread, rows grid-strided over the blocks (no index division).
// The SFU sigmoid keeps the pass memory-bound (the glibc-exact exp made it
// compute-bound: 7.4 ms at 272p, docs/perf.md); the grouped path is judged
// within bf16 tolerance of the CPU anyway (its GEMMs sum in another order).
__global__ void expert_swiglu7(uint16_t* __restrict__ hbuf, int64_t de, const int32_t* __restrict__ offsets, int nf,
                               int64_t max_rows) {
  const int64_t rows = min(static_cast<int64_t>(offsets[nf]), max_rows);
  for (int64_t p = blockIdx.x; p < rows; p += gridDim.x) {
    for (int64_t c = threadIdx.x * 8; c < de; c += blockDim.x * 8) {
      uint16_t* gp = hbuf + p * 2 * de + c;
      const uint4 gv = *reinterpret_cast<const uint4*>(gp);
      const uint4 uv = *reinterpret_cast<const uint4*>(gp + de);
      const uint16_t* g8 = reinterpret_cast<const uint16_t*>(&gv);
      const uint16_t* u8 = reinterpret_cast<const uint16_t*>(&uv);
      uint4 zv;
      uint16_t* z8 = reinterpret_cast<uint16_t*>(&zv);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        z8[j] = f32_to_bf16(swiglu7_f32(bf16_to_f32(g8[j]), bf16_to_f32(u8[j]),
                                        [](float x) { return sigmoid_fast_f32(x); }));
      *reinterpret_cast<uint4*>(gp) = zv;
    }
  }
}

// One warp per (token, head): out = bf16(sum over routes in ascending (expert,
// slot) of bf16(y[row] * weight)), fp32 accumulation. Routes of an invalid
// expert contribute nothing. kWeighted: y is already bf16(y * weight) in bf16
// (W2's row-scale epilogue), so the same terms are summed in the same order.
// q8 (MoeExpertsParams::out8; vec path, d_head a multiple of 128): each
// half-warp's 8 columns a lane are one 1 x 128 group of the row, quantised from
// the bf16 values stored (q8 rows of stride ldq, their scales of stride lds).
template <bool kWeighted>
__global__ void expert_combine(const void* __restrict__ yv, const int32_t* __restrict__ idx,
                               const float* __restrict__ weight, int64_t hs, const int32_t* __restrict__ pos,
                               int64_t t, int mh, int k, int64_t dh, uint16_t* __restrict__ out, int64_t ldo,
                               bool vec, uint8_t* __restrict__ q8, int64_t ldq, float* __restrict__ s8, int64_t lds) {
  __shared__ int32_t spos[8][kMaxK];
  __shared__ float sw[8][kMaxK];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * 8 + warp;
  if (pair >= t * mh) return;
  const int64_t n = pair / mh, h = pair % mh;
  const int64_t base = (h * t + n) * k, ibase = h * hs + n * k;  // pos is the chunk's; idx, weight the call's
  const int e = lane < k ? idx[ibase + lane] : 0;
  int rank = 0;
  for (int j = 0; j < k; ++j) {  // position of (e, lane) among the k (expert, slot) pairs
    const int ej = __shfl_sync(0xffffffffu, e, j);
    rank += (ej < e || (ej == e && j < lane)) ? 1 : 0;
  }
  if (lane < k) {
    spos[warp][rank] = pos[base + lane];
    sw[warp][rank] = weight[ibase + lane];
  }
  __syncwarp();
  uint16_t* o = out + n * ldo + h * dh;
  if (vec) {
    // 8 adjacent columns a lane (16-byte loads and stores), the routes' rows
    // loaded together: the same terms in the same order per column.
    for (int64_t d0 = 8 * lane; d0 < dh; d0 += 256) {
      float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int q = 0; q < k; ++q) {
        const int32_t p = spos[warp][q];
        if (p < 0) continue;
        const int64_t at = static_cast<int64_t>(p) * dh + d0;
        if constexpr (kWeighted) {
          const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(yv) + at);
          const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            sum[2 * i] += __uint_as_float(w[i] << 16);
            sum[2 * i + 1] += __uint_as_float(w[i] & 0xffff0000u);
          }
        } else {
          const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(yv) + at);
          const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(yv) + at + 4);
          const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
          const float wq = sw[warp][q];
#pragma unroll
          for (int i = 0; i < 8; ++i) sum[i] += round_bf16(v[i] * wq);
        }
      }
      uint32_t packed[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        packed[i] = static_cast<uint32_t>(f32_to_bf16(sum[2 * i])) |
                    (static_cast<uint32_t>(f32_to_bf16(sum[2 * i + 1])) << 16);
      *reinterpret_cast<uint4*>(o + d0) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
      if (q8 != nullptr) {
#pragma unroll
        for (int i = 0; i < 8; ++i) sum[i] = round_bf16(sum[i]);
        const int64_t c = h * dh + d0;
        dev::fp8_quantize8_half(sum, q8 + n * ldq + c, s8 + n * lds + c / kFp8ActGroup, lane & 15,
                                (lane & 16) ? 0xffff0000u : 0x0000ffffu);
      }
    }
    return;
  }
  for (int64_t d = lane; d < dh; d += 32) {
    float sum = 0.f;
    for (int q = 0; q < k; ++q) {
      const int32_t p = spos[warp][q];
      if (p < 0) continue;
      if constexpr (kWeighted)
        sum += bf16_to_f32(static_cast<const uint16_t*>(yv)[static_cast<int64_t>(p) * dh + d]);
      else
        sum += round_bf16(static_cast<const float*>(yv)[static_cast<int64_t>(p) * dh + d] * sw[warp][q]);
    }
    o[d] = f32_to_bf16(sum);
  }
}

unsigned grid_of(int64_t work, int threads) {
  const int64_t b = (work + threads - 1) / threads;
  MAGI2_CHECK(b < (int64_t{1} << 31), "moe_experts: too many rows for one launch (", work, ")");
  return static_cast<unsigned>(b > 0 ? b : 1);
}

}  // namespace

// One pass of the grouped path: tokens [n0, n0 + t) of the call. `prm` is the
// call's params with r and out cut to those rows; idx and weight point at the
// pass's first token in head 0, with `hs` (the call's T x K) between heads.
struct MoeExpertsRunner::Pass {
  MoeExpertsParams prm;
  const uint16_t* dq = nullptr;  // FP8 banks for the fused kernel: the three banks dequantised, else null
  const int32_t* idx = nullptr;
  const float* weight = nullptr;
  int64_t hs = 0;
};

struct MoeExpertsRunner::Plan {
  int64_t t = 0, dh = 0, de = 0;
  int mh = 0, ne = 0, k = 0, chunks = 0;
  int64_t max_rows = 0;
  std::shared_ptr<void> cnt, total, offsets, pos, src, xp, hbuf, y;
  // The whole expert in one kernel (moe_expert_fused.h; W13Kernel::kFused):
  // bf16(Y x weight) into y, then the weighted combine; its tile starts.
  bool fused = false;
  // SwiGLU7 in the gate GEMM's epilogue (W13Kernel::kEpilogue, and kFused's
  // fallback): w13_up writes U into hbuf's second half, w13_gate then Z into its first.
  bool epilogue_w13 = false;
  std::unique_ptr<ExpertGemm> w13_up, w13_gate;
  // ... and W2 with the routing weight in its epilogue: wrow [R] the rows'
  // weights (route_scatter), y then bf16 [R, DH] already weighted.
  std::unique_ptr<ExpertGemm> w2_weighted;
  std::shared_ptr<void> wrow;
  std::shared_ptr<void> tile_start;
  std::unique_ptr<MoeW8a8> w8a8;  // FP8 experts with --fp8-compute w8a8: made on the first such call
  std::unique_ptr<ExpertGemm> w13, w2;  // W13Kernel::kGrouped: gate and up in one GEMM, fp32 W2
};

namespace {

// MAGI2_MOE_KERNEL, read once: reference | epilogue | fused (unset: the default).
MoeExpertsRunner::W13Kernel w13_kernel_from_env() {
  using K = MoeExpertsRunner::W13Kernel;
  constexpr K kinds[] = {K::kGrouped, K::kEpilogue, K::kFused};
  const int c = env_choice("MAGI2_MOE_KERNEL", {"reference", "epilogue", "fused"});
  return c < 0 ? MoeExpertsRunner::w13_kernel_default() : kinds[c];
}

}  // namespace

// The whole expert in one kernel since the H200 run of 2026-12-04 (third
// session): the grouped path's bytes, routed experts 16.0 -> 10.7 ms a MoE
// layer at 272p (docs/perf.md); the epilogues where it does not apply.
MoeExpertsRunner::W13Kernel MoeExpertsRunner::w13_kernel_default() { return W13Kernel::kFused; }

MoeExpertsRunner::MoeExpertsRunner(DeviceAlloc alloc, int64_t max_rows, W13Kernel w13)
    : alloc_(std::move(alloc)), max_rows_(max_rows), w13_(w13) {
  MAGI2_CHECK(max_rows_ >= 1, "moe_experts: the routed rows of a pass must be >= 1, got ", max_rows_);
}
struct MoeExpertsRunner::Side {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, ready = nullptr;
  Side() {
    int least = 0, greatest = 0;
    MAGI2_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    // The highest priority: its few blocks take their SMs as soon as any free up.
    MAGI2_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest));
    MAGI2_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    MAGI2_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  }
  ~Side() {
    cudaStreamSynchronize(stream);  // destructor: no throw; the work it waits for is ours
    cudaEventDestroy(ready);
    cudaEventDestroy(fork);
    cudaStreamDestroy(stream);
  }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;
};

MoeExpertsRunner::~MoeExpertsRunner() = default;

namespace {

// MAGI2_FP8_PREFETCH, read once: 0 turns the W8A16 prefetch off, 1 on; unset
// (-1): the caller's default.
int fp8_prefetch_from_env() { return env_choice("MAGI2_FP8_PREFETCH", {"0", "1"}); }

// The prefetch's blocks (1024 threads each) per bank: a few SMs, so the
// attention core beside it keeps the rest (docs/fp8.md). MAGI2_FP8_PREFETCH_BLOCKS
// (1..64) overrides it for measurements.
unsigned prefetch_blocks_per_bank() {
  static const unsigned n = [] {
    const char* v = std::getenv("MAGI2_FP8_PREFETCH_BLOCKS");
    if (v == nullptr || *v == '\0') return 8u;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < 1 || x > 64)
      throw Error(str_cat("MAGI2_FP8_PREFETCH_BLOCKS='", v, "': expected an integer from 1 to 64"));
    return static_cast<unsigned>(x);
  }();
  return n;
}

std::array<Fp8Bank, 3> fp8_banks(const MoeExpertsParams& prm, uint16_t* out, int64_t bank_elems) {
  auto one = [&](const Tensor& q, const Tensor& sc, int i) {
    return Fp8Bank{.q = static_cast<const uint8_t*>(q.data()), .scale = static_cast<const float*>(sc.data()),
                   .out = out + i * bank_elems, .rows = q.size(1), .cols = q.size(2)};
  };
  return {one(prm.w_gate, prm.w_gate_scale, 0), one(prm.w_up, prm.w_up_scale, 1),
          one(prm.w_down, prm.w_down_scale, 2)};
}

}  // namespace

uint16_t* MoeExpertsRunner::dequant_buffer(int banks, int64_t bank_elems, cudaStream_t s) {
  if (!wdq_ || wdq_banks_ < banks || wdq_bank_elems_ != bank_elems) {
    check_not_capturing(s, "moe_experts: no FP8 dequantisation buffer planned; run one eager forward before "
                        "capturing a CUDA graph");
    MAGI2_CUDA_CHECK(cudaStreamSynchronize(s));  // the old buffer may still be in use
    if (side_) MAGI2_CUDA_CHECK(cudaStreamSynchronize(side_->stream));
    wdq_.reset();
    wdq_ = alloc_(static_cast<size_t>(banks * bank_elems) * 2);
    wdq_banks_ = banks, wdq_bank_elems_ = bank_elems;
  }
  return static_cast<uint16_t*>(wdq_.get());
}

void MoeExpertsRunner::prefetch(const MoeExpertsParams& prm, cudaStream_t s, bool by_default) {
  const int env = fp8_prefetch_from_env();
  if (prm.w_gate.dtype() != DType::F8E4M3 || prm.fp8_compute != Fp8Compute::W8A16 ||
      prm.bank_layout != ExpertBankLayout::Checkpoint || env == 0 ||
      (env < 0 && !by_default))
    return;
  const int64_t nf = prm.w_gate.size(0), dh = prm.w_gate.size(1), de = prm.w_gate.size(2);
  if (!(MAGI2_HAVE_CUTLASS && w13_kernel() == W13Kernel::kFused && moe_fused_expert_widths(dh, de))) return;
  const int64_t bank = nf * dh * de;
  uint16_t* dq = dequant_buffer(3, bank, s);
  if (!side_) {
    check_not_capturing(s, "moe_experts: no FP8 prefetch stream made; run one eager forward before capturing a "
                        "CUDA graph");
    side_ = std::make_unique<Side>();
  }
  // The fork orders the pass after everything on s so far: the previous layer's experts have read wdq_.
  MAGI2_CUDA_CHECK(cudaEventRecord(side_->fork, s));
  MAGI2_CUDA_CHECK(cudaStreamWaitEvent(side_->stream, side_->fork, 0));
  const auto banks = fp8_banks(prm, dq, bank);
  fp8_dequant_banks(banks.data(), 3, nf, nullptr, prefetch_blocks_per_bank(), side_->stream);
  MAGI2_CUDA_CHECK(cudaEventRecord(side_->ready, side_->stream));
  prefetched_ = prm.w_gate.data();
}

MoeExpertsRunner::W13Kernel MoeExpertsRunner::w13_kernel() const {
  return w13_ == W13Kernel::kFromEnv ? w13_kernel_from_env() : w13_;
}

bool MoeExpertsRunner::supports(int64_t dh, int64_t de, int k) {
#if MAGI2_HAVE_CUTLASS
  return dh % 8 == 0 && de % 8 == 0 && k <= kMaxK;
#else
  (void)dh, (void)de, (void)k;
  return false;
#endif
}

int64_t MoeExpertsRunner::pass_tokens(int64_t t, int mh, int k) const {
  return moe_pass_tokens(t, static_cast<int64_t>(mh) * k, max_rows_);
}

void MoeExpertsRunner::plan(int64_t t_call, int mh, int ne, int k, int64_t dh, int64_t de, bool fused,
                            cudaStream_t s) {
  const int64_t t = pass_tokens(t_call, mh, k);
  if (plan_ && plan_->t == t && plan_->mh == mh && plan_->ne == ne && plan_->k == k && plan_->dh == dh &&
      plan_->de == de && plan_->fused == fused)
    return;
  check_not_capturing(s, "moe_experts: no workspace planned for ", t_call,
                      " tokens; run one eager forward at this token count before capturing a CUDA graph");
  MAGI2_CUDA_CHECK(cudaStreamSynchronize(s));  // the old plan's buffers may still be in use
  plan_.reset();
  auto p = std::make_unique<Plan>();
  p->t = t, p->mh = mh, p->ne = ne, p->k = k, p->dh = dh, p->de = de;
  const int64_t routes = t * k;
  p->chunks = static_cast<int>((routes + kChunk - 1) / kChunk);
  p->max_rows = t * mh * k;
  MAGI2_CHECK(p->max_rows < (int64_t{1} << 31), "moe_experts: ", p->max_rows, " routes exceed int32 row indices");
  const int64_t nf = static_cast<int64_t>(mh) * ne;
  auto get = [&](int64_t n, size_t elem) { return alloc_(static_cast<size_t>(n > 0 ? n : 1) * elem); };
  p->cnt = get(nf * p->chunks, 4);
  p->total = get(nf, 4);
  p->offsets = get(nf + 1, 4);
  p->pos = get(p->max_rows, 4);
  p->src = get(p->max_rows, 4);
#if MAGI2_HAVE_CUTLASS
  p->fused = fused;
  p->wrow = get(p->max_rows, 4);  // with the fused kernel and the epilogues; unused by the reference path
  if (fused) {  // the kernel gathers its rows and keeps the intermediate on chip: y [R, DH] bf16
    p->tile_start = get(nf + 1, 4);
    p->y = get(p->max_rows * dh, 2);
    plan_ = std::move(p);
    return;
  }
#endif
  p->xp = get(p->max_rows * dh, 2);
  p->hbuf = get(p->max_rows * 2 * de, 2);
  p->y = get(p->max_rows * dh, 4);
#if MAGI2_HAVE_CUTLASS
  // kFused runs the epilogues where the fused kernel does not apply (unaligned rows, other widths).
  const W13Kernel w13 = w13_kernel();
  p->epilogue_w13 = w13 == W13Kernel::kEpilogue || w13 == W13Kernel::kFused;
  if (p->epilogue_w13) {
    p->w13_up = make_expert_gemm_bf16({.experts = static_cast<int>(nf), .parts = 1, .n = de, .k = dh, .lda = dh,
                                       .ldd = 2 * de}, alloc_);
    p->w13_gate = make_expert_gemm_swiglu7({.experts = static_cast<int>(nf), .parts = 1, .n = de, .k = dh,
                                            .lda = dh, .ldd = 2 * de}, alloc_);
    p->w2_weighted = make_expert_gemm_row_scale({.experts = static_cast<int>(nf), .parts = 1, .n = dh, .k = de,
                                                 .lda = 2 * de, .ldd = dh}, alloc_);
  } else {
    p->w13 = make_expert_gemm_bf16({.experts = static_cast<int>(nf), .parts = 2, .n = de, .k = dh, .lda = dh,
                                    .ldd = 2 * de}, alloc_);
    p->w2 = make_expert_gemm_f32({.experts = static_cast<int>(nf), .parts = 1, .n = dh, .k = de, .lda = 2 * de,
                                  .ldd = dh}, alloc_);
  }
#endif
  plan_ = std::move(p);
}

void MoeExpertsRunner::run(const MoeExpertsParams& prm, cudaStream_t s, const std::function<void(int)>& mark) {
  const int mh = prm.num_heads, ne = prm.num_experts, k = prm.top_k;
  const int64_t t = prm.r.size(0), dh = prm.r.size(1) / mh, de = moe_expert_width(prm);
  MAGI2_CHECK(supports(dh, de, k), "moe_experts: the grouped path needs widths that are multiples of 8 and top-k <= ",
              kMaxK);
  if (t == 0) return;
  // The fused kernel: bf16 banks, or FP8 banks dequantised to bf16 (W8A16),
  // its widths, and rows it can copy 16 bytes at a time (every pass's rows
  // then too: a pass starts n0 x ldr elements on, ldr a multiple of 8).
  // W8A8 always runs its own fused kernel (moe_w8a8.h), with the same plan.
  const bool w8a8 = prm.w_gate.dtype() == DType::F8E4M3 && prm.fp8_compute == Fp8Compute::W8A8;
  const bool fused = MAGI2_HAVE_CUTLASS &&
                     (w8a8 || (w13_kernel() == W13Kernel::kFused && moe_fused_expert_widths(dh, de) &&
                               reinterpret_cast<uintptr_t>(prm.r.data()) % 16 == 0 && prm.r.row_stride() % 8 == 0));
  if (w8a8)
    MAGI2_CHECK(MoeW8a8::supports(dh, de), "moe_experts: --fp8-compute w8a8 on CUDA needs d_head 256, d_expert a "
                "multiple of 128 up to 8192 and CUTLASS (d_head ", dh, ", d_expert ", de, ")");
  plan(t, mh, ne, k, dh, de, fused, s);
  // FP8 banks for the fused kernel: dequantised once for every pass, by the
  // prefetch (joined here) or now. Any pending prefetch is joined either way.
  const uint16_t* dq = nullptr;
  const bool prefetched = prefetched_ != nullptr && prefetched_ == prm.w_gate.data();
  if (prefetched_ != nullptr) MAGI2_CUDA_CHECK(cudaStreamWaitEvent(s, side_->ready, 0));
  prefetched_ = nullptr;
  if (w8a8) {  // the banks to K-major once for every pass, unless held K-major (moe_prepare_banks)
    Plan& pl = *plan_;
    if (!pl.w8a8) {
      check_not_capturing(s, "moe_experts: no W8A8 workspace planned; run one eager forward before capturing a "
                          "CUDA graph");
      pl.w8a8 = std::make_unique<MoeW8a8>(mh * ne, pl.max_rows, dh, de, alloc_);
    }
    if (prm.bank_layout == ExpertBankLayout::Checkpoint) pl.w8a8->transpose_banks(prm, s);
  }
  if (fused && !w8a8 && prm.w_gate.dtype() == DType::F8E4M3) {
    const int64_t nf = static_cast<int64_t>(mh) * ne, bank = nf * dh * de;
    uint16_t* buf = dequant_buffer(3, bank, s);
    if (!prefetched) {
      const auto banks = fp8_banks(prm, buf, bank);
      fp8_dequant_banks(banks.data(), 3, nf, nullptr, 0, s);
    }
    dq = buf;
  }
  // Token passes: a routed row's GEMMs and a token's combine read nothing of
  // the other rows (no split-K, fixed summation order), so the bytes do not
  // depend on how many passes there are; only the workspace does.
  const int64_t tp = plan_->t;
  for (int64_t n0 = 0; n0 < t; n0 += tp) {
    const int64_t n1 = std::min(t, n0 + tp);
    Pass ps{.prm = prm, .dq = dq, .idx = static_cast<const int32_t*>(prm.idx.data()) + n0 * k,
            .weight = static_cast<const float*>(prm.weight.data()) + n0 * k, .hs = t * k};
    ps.prm.r = prm.r.slice_rows(n0, n1);
    ps.prm.out = prm.out.slice_rows(n0, n1);
    if (prm.out8.defined()) ps.prm.out8 = {prm.out8.q.slice_rows(n0, n1), prm.out8.scale.slice_rows(n0, n1)};
    run_pass(ps, s, mark);
  }
}

void MoeExpertsRunner::run_pass(const Pass& ps, cudaStream_t s, const std::function<void(int)>& mark) {
  const MoeExpertsParams& prm = ps.prm;
  const int mh = prm.num_heads, ne = prm.num_experts, k = prm.top_k;
  const int64_t t = prm.r.size(0), dh = prm.r.size(1) / mh, de = moe_expert_width(prm);
  Plan& p = *plan_;
  const int64_t routes = t * k, max_rows = t * mh * k;
  const int chunks = static_cast<int>((routes + kChunk - 1) / kChunk);
  const int nf = mh * ne;
  auto i32 = [](const std::shared_ptr<void>& b) { return static_cast<int32_t*>(b.get()); };
  // The deterministic combine of the W2 output y [R, DH] (fp32, or bf16 already
  // weighted by W2's epilogue) into the pass's out rows.
  auto combine = [&](bool weighted) {
    auto* kernel = weighted ? expert_combine<true> : expert_combine<false>;
    // 16-byte accesses where every row start is 16-byte aligned (d_head and the
    // out stride multiples of 8, aligned bases).
    const bool vec = dh % 8 == 0 && prm.out.row_stride() % 8 == 0 &&
                     reinterpret_cast<uintptr_t>(prm.out.data()) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(p.y.get()) % 16 == 0;
    // out's FP8 rows in the combine where its lanes hold whole groups, else in a second pass.
    const Fp8Rows& o8 = prm.out8;
    const bool q8 = o8.defined() && vec && dh % kFp8ActGroup == 0 &&
                    reinterpret_cast<uintptr_t>(o8.q.data()) % 8 == 0 && o8.q.row_stride() % 8 == 0;
    kernel<<<grid_of(t * mh, 8), 256, 0, s>>>(p.y.get(), ps.idx, ps.weight, ps.hs, i32(p.pos), t, mh, k, dh,
                                              static_cast<uint16_t*>(prm.out.data()), prm.out.row_stride(), vec,
                                              q8 ? o8.q.data_as<uint8_t>() : nullptr, o8.q.row_stride(),
                                              q8 ? o8.scale.data_as<float>() : nullptr, o8.scale.row_stride());
    MAGI2_CUDA_CHECK_LAUNCH("moe_experts combine");
    if (o8.defined() && !q8) quantize_fp8_rows_of(prm.out, o8, s, "moe_experts.out8");
  };
  const bool w8a8 = prm.w_gate.dtype() == DType::F8E4M3 && prm.fp8_compute == Fp8Compute::W8A8;
  // The routing weight in W2's epilogue (with the SwiGLU7 epilogue and in the fused kernels).
  const bool weighted_w2 = p.epilogue_w13 || p.fused;
  const dim3 sort_grid(static_cast<unsigned>(chunks), static_cast<unsigned>(mh));
  route_hist<<<sort_grid, kChunk, static_cast<size_t>(ne) * 4, s>>>(ps.idx, ps.hs, routes, ne, chunks, i32(p.cnt));
  MAGI2_CUDA_CHECK_LAUNCH("moe_experts route counts");
  route_chunk_scan<<<grid_of(nf, 256), 256, 0, s>>>(i32(p.cnt), mh, ne, chunks, i32(p.total));
  route_expert_scan<<<1, kScanThreads, 0, s>>>(i32(p.total), nf, i32(p.offsets));
  route_scatter<<<sort_grid, kChunk, 0, s>>>(ps.idx, ps.hs, routes, k, mh, ne, chunks, i32(p.cnt), i32(p.offsets),
                                               i32(p.pos), i32(p.src), ps.weight,
                                               weighted_w2 ? static_cast<float*>(p.wrow.get()) : nullptr);
  MAGI2_CUDA_CHECK_LAUNCH("moe_experts route order");
  if (w8a8) {  // MoeExpertsRunner::run made p.w8a8 and transposed the banks
    p.w8a8->run(prm, i32(p.offsets), i32(p.pos), static_cast<const float*>(p.wrow.get()),
                static_cast<uint16_t*>(p.y.get()), i32(p.tile_start), s, mark);
    combine(true);
    if (mark) mark(4);
    return;
  }
  const auto* r = static_cast<const uint16_t*>(prm.r.data());
  const bool vec = reinterpret_cast<uintptr_t>(r) % 16 == 0 && prm.r.row_stride() % 8 == 0 && dh % 8 == 0;
  const bool fp8 = prm.w_gate.dtype() == DType::F8E4M3;
  const int64_t bank = static_cast<int64_t>(nf) * dh * de;  // elements of one bank
  if (p.fused) {  // the whole expert in one kernel (it gathers its rows): bf16(Y x weight) into y
    if (mark) mark(0);
    const void* w[3] = {prm.w_gate.data(), prm.w_up.data(), prm.w_down.data()};
    if (fp8) {
      MAGI2_CHECK(ps.dq != nullptr, "moe_experts: FP8 banks reached the fused kernel without their bf16 copy");
      for (int i = 0; i < 3; ++i) w[i] = ps.dq + i * bank;
    }
#if MAGI2_HAVE_CUTLASS
    moe_expert_fused({.r = r, .ldr = prm.r.row_stride(), .mh = mh, .dh = dh, .de = de, .src = i32(p.src),
                      .offsets = i32(p.offsets), .nf = nf, .max_rows = max_rows,
                      .w_gate = static_cast<const uint16_t*>(w[0]), .w_up = static_cast<const uint16_t*>(w[1]),
                      .w_down = static_cast<const uint16_t*>(w[2]), .wrow = static_cast<const float*>(p.wrow.get()),
                      .y = static_cast<uint16_t*>(p.y.get()), .tile_start = i32(p.tile_start)},
                     s);
#endif
    if (mark)
      for (int i = 1; i <= 3; ++i) mark(i);  // one kernel for W13, SwiGLU7 and W2
    combine(true);
    if (mark) mark(4);
    return;
  }
  route_gather<<<grid_of(max_rows * 32, 256), 256, 0, s>>>(r, prm.r.row_stride(), mh, dh, i32(p.src), i32(p.offsets),
                                                           nf, max_rows, static_cast<uint16_t*>(p.xp.get()), vec);
  MAGI2_CUDA_CHECK_LAUNCH("moe_experts gather");
  if (mark) mark(0);
  uint16_t* dq0 = nullptr;
  uint16_t* dq1 = nullptr;
  // The GEMM path's FP8 banks: gate and up now, W_down into the gate's slot after W13
  // (experts without routed rows skipped: the GEMMs never read them).
  const auto fp8_banks_of = [&](uint16_t* buf) { return fp8_banks(prm, buf, bank); };
  if (fp8) {
    dq0 = dequant_buffer(2, bank, s);
    dq1 = dq0 + bank;
    const auto banks = fp8_banks_of(dq0);
    fp8_dequant_banks(banks.data(), 2, nf, i32(p.offsets), 0, s);
  }
  const void* b13[2] = {fp8 ? dq0 : prm.w_gate.data(), fp8 ? dq1 : prm.w_up.data()};
  ExpertGemm* w2 = p.w2.get();
  if (p.epilogue_w13) {  // U into hbuf[:, de:], then Z = swiglu7(gate, U) into hbuf[:, :de]
    p.w13_up->run(i32(p.offsets), p.xp.get(), &b13[1], static_cast<uint16_t*>(p.hbuf.get()) + de, s);
    p.w13_gate->run(i32(p.offsets), p.xp.get(), &b13[0], p.hbuf.get(), s);
    if (mark) mark(1);
  } else {
    p.w13->run(i32(p.offsets), p.xp.get(), b13, p.hbuf.get(), s);
    if (mark) mark(1);
    // Enough resident blocks to fill the GPU; each strides over the rows.
    const unsigned swiglu_blocks = static_cast<unsigned>(std::min<int64_t>(max_rows, 132 * 16));
    expert_swiglu7<<<swiglu_blocks, 160, 0, s>>>(static_cast<uint16_t*>(p.hbuf.get()), de, i32(p.offsets), nf,
                                                 max_rows);
    MAGI2_CUDA_CHECK_LAUNCH("moe_experts swiglu7");
  }
  if (mark) mark(2);
  // The W13 GEMM is done with dq0 (same stream) before W_down overwrites it.
  if (fp8) {
    Fp8Bank down = fp8_banks_of(dq0)[2];
    down.out = dq0;
    fp8_dequant_banks(&down, 1, nf, i32(p.offsets), 0, s);
  }
  const void* b2[1] = {fp8 ? dq0 : prm.w_down.data()};
  if (weighted_w2)
    p.w2_weighted->run(i32(p.offsets), p.hbuf.get(), b2, p.y.get(), s, static_cast<const float*>(p.wrow.get()));
  else
    w2->run(i32(p.offsets), p.hbuf.get(), b2, p.y.get(), s);
  if (mark) mark(3);
  combine(weighted_w2);
  if (mark) mark(4);
}

}  // namespace magi2::cuda
