// Multi-head MoE kernels of the CUDA backend: the sigmoid router with expert
// bias and top-k (spec magi2-dit.md §8.2) and the scalar routed-expert kernel
// with its deterministic combination (§8.3-8.4); both reproduce the CPU
// reference (src/cpu/moe.cpp) bit for bit: the router's logits use dot_f32's
// 16-lane order (device_fp.cuh), the top-k the CPU comparator's total order
// (descending, NaN first, lowest expert id on ties), and each scalar expert
// output is one thread's sequential fp32 sum in the CPU's index order (no FMA,
// --fmad=false), combined in ascending expert id. moe_experts hands supported
// shapes to the tensor-core grouped GEMM path (moe_grouped.cu); the scalar
// kernel (a block per (token, head), weights streamed per route) remains the
// bit-exact fallback. No host sync and no float atomics.
#include <cstdint>

#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/fused_kernels.h"
#include "cuda/linear_fp8.h"
#include "cuda/mhc_moe.h"
#include "cuda/route_select.cuh"
#include "ops/fp8_blocks.h"
#include "ops/numerics.h"
#include "ops/op_checks.h"

namespace magi2::cuda {

namespace {

using namespace dev;

constexpr int kMaxTopK = 32;  // route lists live in shared memory

// Router tiling: a block holds kRouteTokens tokens of one head and walks the
// head's experts in chunks of kRouteExperts. Each of the 256 threads owns one
// dot-product lane (d = lane mod 16, dot_f32's partial sums) of an 8 x 8
// (token, expert) tile, so every shared-memory load feeds 8 products; the 16
// lanes of a half-warp then combine in dot_f32's tree (half_warp_tree).
constexpr int kRouteTokens = 32;
constexpr int kRouteExperts = 32;
constexpr int kRouteThreads = 256;

__host__ __device__ constexpr int route_ldx(int64_t dh) { return static_cast<int>(dh) + 2; }  // no bank conflicts

size_t route_shared_bytes(int64_t dh, int ne) {
  return (static_cast<size_t>(kRouteTokens + kRouteExperts) * route_ldx(dh) + static_cast<size_t>(kRouteTokens) * ne +
          ne) * 4;
}

// Grid (ceil(T / kRouteTokens), MH). Shared memory: x [32][dh+2], a gate chunk
// [32][dh+2], the sigmoid scores [32][ne], the head's bias [ne] (floats).
__global__ void __launch_bounds__(kRouteThreads)
    moe_route_kernel(const uint16_t* __restrict__ r, int64_t ldr, const float* __restrict__ gate,
                     const float* __restrict__ bias, int32_t* __restrict__ idx_out, float* __restrict__ w_out,
                     const int32_t* __restrict__ forced, float* __restrict__ margin, int64_t t, int ne, int k,
                     int64_t dh, float route_scale, bool normalize) {
  extern __shared__ float smem[];
  __shared__ int order[kRouteThreads / 32][kMaxTopK + 1];
  const int ldx = route_ldx(dh);
  float* xs = smem;
  float* gs = xs + kRouteTokens * ldx;
  float* sc = gs + kRouteExperts * ldx;
  float* bs = sc + kRouteTokens * ne;
  const int h = blockIdx.y;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRouteTokens;
  const int tid = threadIdx.x;
  __shared__ uint64_t exp_table[32];
  exp2_table_to_shared(exp_table);
  const int warp = tid >> 5, wl = tid & 31;
  // Row-wise loads (a warp per row, no index division).
  for (int tok = warp; tok < kRouteTokens; tok += kRouteThreads / 32) {
    const int64_t n = n0 + tok;
    for (int d = wl; d < dh; d += 32) xs[tok * ldx + d] = n < t ? bf16_to_f32(r[n * ldr + h * dh + d]) : 0.f;
  }
  for (int e = tid; e < ne; e += kRouteThreads) bs[e] = bias[h * ne + e];
  const int lane = tid & 15, tile = tid >> 4, tg = tile & 3, eg = tile >> 2;
  for (int e0 = 0; e0 < ne; e0 += kRouteExperts) {
    __syncthreads();  // the previous chunk is consumed (and x is loaded)
    for (int ee = warp; ee < kRouteExperts; ee += kRouteThreads / 32) {
      const int e = e0 + ee;
      const float* gr = gate + (static_cast<int64_t>(h) * ne + e) * dh;
      for (int d = wl; d < dh; d += 32) gs[ee * ldx + d] = e < ne ? gr[d] : 0.f;
    }
    __syncthreads();
    float acc[8][8];
#pragma unroll
    for (int a = 0; a < 8; ++a)
#pragma unroll
      for (int b = 0; b < 8; ++b) acc[a][b] = 0.f;
    const float* xt = xs + tg * 8 * ldx;
    const float* gt = gs + eg * 8 * ldx;
    for (int64_t d = lane; d < dh; d += 16) {
      float xv[8], gv[8];
#pragma unroll
      for (int a = 0; a < 8; ++a) xv[a] = xt[a * ldx + d];
#pragma unroll
      for (int b = 0; b < 8; ++b) gv[b] = gt[b * ldx + d];
#pragma unroll
      for (int a = 0; a < 8; ++a)
#pragma unroll
        for (int b = 0; b < 8; ++b) acc[a][b] += xv[a] * gv[b];  // no FMA (--fmad=false), as the CPU
    }
#pragma unroll
    for (int a = 0; a < 8; ++a)
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const float v = half_warp_tree(acc[a][b]);
        const int e = e0 + eg * 8 + b;
        if (lane == 0 && e < ne) sc[(tg * 8 + a) * ne + e] = v;
      }
  }
  __syncthreads();
  // The sigmoids by all threads (one lane per half-warp above would idle 15 of 16).
  for (int i = tid; i < kRouteTokens * ne; i += kRouteThreads) sc[i] = sigmoid_f32(sc[i], exp_table);
  __syncthreads();
  for (int tok = warp; tok < kRouteTokens; tok += kRouteThreads / 32) {
    const int64_t n = n0 + tok;
    if (n >= t) break;
    route_select(sc + tok * ne, bs, ne, k, order[warp], static_cast<int64_t>(h) * t + n, forced, margin, idx_out,
                 w_out, route_scale, normalize);
  }
}

// One block per (token n, head h) = blockIdx.x = n * mh + h. Shared memory:
// x [dh], z [de], sum [dh] floats. Routes run in ascending (expert id, slot).
__global__ void moe_experts_kernel(const uint16_t* __restrict__ r, int64_t ldr, const uint16_t* __restrict__ wg,
                                   const uint16_t* __restrict__ wu, const uint16_t* __restrict__ wd,
                                   const int32_t* __restrict__ idx, const float* __restrict__ weight,
                                   uint16_t* __restrict__ out, int64_t ldo, int64_t t, int mh, int ne, int k,
                                   int64_t dh, int64_t de) {
  extern __shared__ float smem[];
  float* x = smem;
  float* z = x + dh;
  float* sum = z + de;
  __shared__ int route_e[kMaxTopK];
  __shared__ int route_j[kMaxTopK];
  const int64_t n = blockIdx.x / mh;
  const int h = static_cast<int>(blockIdx.x % mh);
  const int64_t base = (static_cast<int64_t>(h) * t + n) * k;
  const uint16_t* rr = r + n * ldr + h * dh;
  for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) {
    x[d] = bf16_to_f32(rr[d]);
    sum[d] = 0.f;
  }
  if (threadIdx.x == 0) {  // insertion sort of (expert id, slot) pairs: k is small
    for (int j = 0; j < k; ++j) {
      const int e = idx[base + j];
      int p = j;
      while (p > 0 && (route_e[p - 1] > e || (route_e[p - 1] == e && route_j[p - 1] > j))) {
        route_e[p] = route_e[p - 1];
        route_j[p] = route_j[p - 1];
        --p;
      }
      route_e[p] = e;
      route_j[p] = j;
    }
  }
  __syncthreads();
  for (int q = 0; q < k; ++q) {
    const int e = route_e[q];
    if (e < 0 || e >= ne) continue;  // uniform across the block
    const int64_t f = static_cast<int64_t>(h) * ne + e;
    const uint16_t* wgf = wg + f * dh * de;
    const uint16_t* wuf = wu + f * dh * de;
    for (int64_t c = threadIdx.x; c < de; c += blockDim.x) {
      float g = 0.f, u = 0.f;
      for (int64_t d = 0; d < dh; ++d) {
        const float xd = x[d];
        g += xd * bf16_to_f32(wgf[d * de + c]);
        u += xd * bf16_to_f32(wuf[d * de + c]);
      }
      z[c] = round_bf16(swiglu7_f32(g, u, [](float x) { return sigmoid_f32(x); }));
    }
    __syncthreads();
    const uint16_t* wdf = wd + f * de * dh;
    const float w = weight[base + route_j[q]];
    for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) {
      float y = 0.f;
      for (int64_t c = 0; c < de; ++c) y += z[c] * bf16_to_f32(wdf[c * dh + d]);
      sum[d] += round_bf16(y * w);
    }
    __syncthreads();  // z is rewritten by the next route
  }
  uint16_t* o = out + n * ldo + h * dh;
  for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) o[d] = f32_to_bf16(sum[d]);
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data());
}

void check_dev(const Tensor& t, DType dt, const Shape& shape, const char* what) {
  MAGI2_CHECK(t.defined() && t.device() == Device::CUDA && t.dtype() == dt && t.shape() == shape && t.is_contiguous(),
              what, ": expected contiguous ", dtype_name(dt), " ", shape_str(shape), " on the device, got ",
              t.defined() ? shape_str(t.shape()) : std::string("nothing"));
}

unsigned blocks_of(int64_t t, int mh, const char* what) {
  const int64_t b = t * mh;
  MAGI2_CHECK(b < (int64_t{1} << 31), what, ": too many (token, head) pairs for one launch (", b, ")");
  return static_cast<unsigned>(b);
}

constexpr size_t kMaxShared = 48 * 1024;  // without opting in to larger dynamic shared memory
constexpr size_t kMaxOptInShared = 200 * 1024;  // sm90 allows 227 KiB per block after opting in

}  // namespace

void moe_route(const MoeRouteParams& p, cudaStream_t s, const FusedPaths* fast) {
  const int mh = p.num_heads, ne = p.num_experts, k = p.top_k;
  MAGI2_CHECK(mh > 0 && ne > 0 && k > 0 && k <= ne, "moe_route: bad head/expert/top-k counts");
  MAGI2_CHECK(p.r.defined() && p.r.dim() == 2, "moe_route.r: expected a 2-D tensor");
  const int64_t t = p.r.size(0);
  const int64_t dh = p.r.size(1) / mh;
  check_2d(p.r, t, mh * dh, "moe_route.r");
  MAGI2_CHECK(p.r.dtype() == DType::BF16, "moe_route.r: expected bf16");
  check_dev(p.gate, DType::F32, Shape({static_cast<int64_t>(mh) * ne, dh}), "moe_mlp.gate");
  check_dev(p.bias, DType::F32, Shape({static_cast<int64_t>(mh) * ne}), "router bias");
  const Shape out_shape{mh, t, k};
  check_dev(p.idx, DType::I32, out_shape, "moe_route.idx");
  check_dev(p.weight, DType::F32, out_shape, "moe_route.weight");
  if (p.forced_idx.defined()) check_dev(p.forced_idx, DType::I32, out_shape, "forced routing");
  if (p.margin.defined()) check_dev(p.margin, DType::F32, Shape({mh, t}), "moe_route.margin");
  MAGI2_CHECK(k <= kMaxTopK, "moe_route: top-", k, " exceeds the CUDA router's ", kMaxTopK);
  const size_t shared = route_shared_bytes(dh, ne);
  MAGI2_CHECK(shared <= kMaxOptInShared, "moe_route: ", dh, " head dims and ", ne, " experts exceed shared memory");
  if (t == 0) return;
  if (fast != nullptr && fast->router && moe_route_fused(p, *fast->scratch, s, fast->router_select)) return;
  static const bool opted_in = [] {  // not a stream operation: fine during graph capture
    MAGI2_CUDA_CHECK(cudaFuncSetAttribute(moe_route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kMaxOptInShared)));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>((t + kRouteTokens - 1) / kRouteTokens), static_cast<unsigned>(mh));
  MAGI2_CHECK(grid.x < (1u << 31), "moe_route: too many tokens (", t, ")");
  moe_route_kernel<<<grid, kRouteThreads, shared, s>>>(
      ptr<const uint16_t>(p.r), p.r.row_stride(), ptr<const float>(p.gate), ptr<const float>(p.bias),
      ptr<int32_t>(p.idx), ptr<float>(p.weight), p.forced_idx.defined() ? ptr<const int32_t>(p.forced_idx) : nullptr,
      p.margin.defined() ? ptr<float>(p.margin) : nullptr, t, ne, k, dh, p.route_scale, p.normalize);
  MAGI2_CUDA_CHECK_LAUNCH("moe_route");
}

void moe_experts(const MoeExpertsParams& p, MoeExpertsRunner* grouped, cudaStream_t s) {
  const int mh = p.num_heads, ne = p.num_experts, k = p.top_k;
  MAGI2_CHECK(mh > 0 && ne > 0 && k > 0 && k <= kMaxTopK, "moe_experts: bad head/expert/top-k counts");
  MAGI2_CHECK(p.r.defined() && p.r.dim() == 2, "moe_experts.r: expected a 2-D tensor");
  const int64_t t = p.r.size(0);
  const int64_t dh = p.r.size(1) / mh;
  check_2d(p.r, t, mh * dh, "moe_experts.r");
  check_2d(p.out, t, mh * dh, "moe_experts.out");
  MAGI2_CHECK(p.r.dtype() == DType::BF16 && p.out.dtype() == DType::BF16, "moe_experts: r and out must be bf16");
  const int64_t de = moe_expert_width(p);
  const Shape up_shape{static_cast<int64_t>(mh) * ne, dh, de};
  const Shape down_shape{static_cast<int64_t>(mh) * ne, de, dh};
  const bool fp8 = p.w_gate.defined() && p.w_gate.dtype() == DType::F8E4M3;
  const DType wt = fp8 ? DType::F8E4M3 : DType::BF16;
  // K-major banks (moe_prepare_banks) hold each expert's matrix transposed; only W8A8 reads them.
  const bool k_major = p.bank_layout == ExpertBankLayout::KMajorW8a8;
  MAGI2_CHECK(!k_major || (fp8 && p.fp8_compute == Fp8Compute::W8A8),
              "moe_experts: K-major expert banks are read only by --fp8-compute w8a8 on FP8 banks");
  const Shape up_held = k_major ? Shape{up_shape[0], de, dh} : up_shape;
  const Shape down_held = k_major ? Shape{down_shape[0], dh, de} : down_shape;
  check_dev(p.w_gate, wt, up_held, "moe_mlp.W_gate");
  check_dev(p.w_up, wt, up_held, "moe_mlp.W_up");
  check_dev(p.w_down, wt, down_held, "moe_mlp.W_down");
  if (fp8) {
    check_dev(p.w_gate_scale, DType::F32, fp8_scale_shape(up_shape), "moe_mlp.W_gate_scale_inv");
    check_dev(p.w_up_scale, DType::F32, fp8_scale_shape(up_shape), "moe_mlp.W_up_scale_inv");
    check_dev(p.w_down_scale, DType::F32, fp8_scale_shape(down_shape), "moe_mlp.W_down_scale_inv");
    MAGI2_CHECK(grouped != nullptr && MoeExpertsRunner::supports(dh, de, k),
                "moe_experts: FP8 expert weights need the grouped GEMM path (CUTLASS built in, widths multiples of 8, "
                "top-k <= 32); got ", dh, " head dims, ", de, " expert dims, top-", k);
  }
  const Shape route_shape{mh, t, k};
  check_dev(p.idx, DType::I32, route_shape, "moe_experts.idx");
  check_dev(p.weight, DType::F32, route_shape, "moe_experts.weight");
  if (p.out8.defined()) check_fp8_rows(Device::CUDA, p.out8, t, mh * dh, "moe_experts.out8");
  if (t == 0) return;
  if (grouped != nullptr && MoeExpertsRunner::supports(dh, de, k)) {
    grouped->run(p, s);  // its combine writes out8 (or a second pass does)
    return;
  }
  const size_t shared = static_cast<size_t>(2 * dh + de) * 4;
  MAGI2_CHECK(shared <= kMaxShared, "moe_experts: ", dh, " head dims and ", de,
              " expert dims exceed shared memory");
  moe_experts_kernel<<<blocks_of(t, mh, "moe_experts"), 256, shared, s>>>(
      ptr<const uint16_t>(p.r), p.r.row_stride(), ptr<const uint16_t>(p.w_gate), ptr<const uint16_t>(p.w_up),
      ptr<const uint16_t>(p.w_down), ptr<const int32_t>(p.idx), ptr<const float>(p.weight), ptr<uint16_t>(p.out),
      p.out.row_stride(), t, mh, ne, k, dh, de);
  MAGI2_CUDA_CHECK_LAUNCH("moe_experts");
  if (p.out8.defined()) quantize_fp8_rows_of(p.out, p.out8, s, "moe_experts.out8");
}

}  // namespace magi2::cuda
