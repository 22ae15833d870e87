// Multi-head MoE kernels of the CUDA backend: the sigmoid router with expert
// bias and top-k (spec magi2-dit.md §8.2) and the routed experts with their
// deterministic combination (§8.3-8.4). Both reproduce the CPU reference
// (src/cpu/moe.cpp) bit for bit: the router's logits use dot_f32's 16-lane
// order (device_fp.cuh), the top-k is the CPU comparator's total order
// (descending, NaN first, lowest expert id on ties) computed as ranks, and
// each expert GEMM output is one thread's sequential fp32 sum in the CPU's
// index order (no FMA, --fmad=false), combined in ascending expert id.
//
// Phase 1 (correctness first): moe_experts runs one block per (token, MoE
// head), so every route streams its expert's weights from L2/HBM with no
// reuse across tokens; fine for tests and short runs, far from the grouped
// GEMM the release model needs (docs/cuda.md "Next"). No host sync and no
// float atomics: the routing stays on the device.
#include <cstdint>

#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/mhc_moe.h"

namespace magi2::cuda {

namespace {

using namespace dev;

constexpr int kMaxTopK = 32;  // route lists live in shared memory

// The CPU's strict order: does expert a rank before expert b?
__device__ __forceinline__ bool ranks_before(const float* sel, int a, int b) {
  const bool na = isnan(sel[a]), nb = isnan(sel[b]);
  if (na || nb) return na && (!nb || a < b);
  if (sel[a] != sel[b]) return sel[a] > sel[b];
  return a < b;
}

// One block per (token n, head h) = blockIdx.x = n * mh + h. Shared memory:
// x [dh], score [ne], sel [ne], order [k + 1] (floats / ints).
__global__ void moe_route_kernel(const uint16_t* __restrict__ r, int64_t ldr, const float* __restrict__ gate,
                                 const float* __restrict__ bias, int32_t* __restrict__ idx_out,
                                 float* __restrict__ w_out, const int32_t* __restrict__ forced,
                                 float* __restrict__ margin, int64_t t, int mh, int ne, int k, int64_t dh,
                                 float route_scale, bool normalize) {
  extern __shared__ float smem[];
  float* x = smem;
  float* score = x + dh;
  float* sel = score + ne;
  int* order = reinterpret_cast<int*>(sel + ne);
  const int64_t n = blockIdx.x / mh;
  const int h = static_cast<int>(blockIdx.x % mh);
  const uint16_t* rr = r + n * ldr + h * dh;
  for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) x[d] = bf16_to_f32(rr[d]);
  __syncthreads();
  for (int e = threadIdx.x; e < ne; e += blockDim.x) {
    score[e] = sigmoid_f32(dot16(x, gate + (static_cast<int64_t>(h) * ne + e) * dh, dh));
    sel[e] = score[e] + bias[h * ne + e];
  }
  __syncthreads();
  // The order is total, so each expert's rank (how many rank before it) is its
  // position in the CPU's partially sorted list.
  const int take = k + 1 < ne ? k + 1 : ne;
  for (int e = threadIdx.x; e < ne; e += blockDim.x) {
    int rank = 0;
    for (int a = 0; a < ne && rank < take; ++a) rank += ranks_before(sel, a, e) ? 1 : 0;
    if (rank < take) order[rank] = e;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int64_t base = (static_cast<int64_t>(h) * t + n) * k;
  if (margin != nullptr) margin[h * t + n] = k < ne ? sel[order[k - 1]] - sel[order[k]] : INFINITY;
  int32_t* idx = idx_out + base;
  for (int j = 0; j < k; ++j) {
    int e = order[j];
    if (forced != nullptr) {
      e = forced[base + j];
      e = e < 0 ? 0 : (e > ne - 1 ? ne - 1 : e);
    }
    idx[j] = e;
  }
  float l1 = 0.f;
  for (int j = 0; j < k; ++j) l1 += fabsf(score[idx[j]]);
  const float denom = normalize ? ((l1 < 1e-12f) ? 1e-12f : l1) : 1.0f;  // std::max(l1, 1e-12f)
  for (int j = 0; j < k; ++j) {
    const float pn = normalize ? score[idx[j]] / denom : score[idx[j]];
    w_out[base + j] = pn * route_scale;
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
      const float gc = g > 7.0f ? 7.0f : g;
      const float uc = u > 7.0f ? 7.0f : (u < -7.0f ? -7.0f : u);
      z[c] = round_bf16((gc * sigmoid_f32(1.702f * gc)) * (uc + 1.0f));
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

}  // namespace

void moe_route(const MoeRouteParams& p, cudaStream_t s) {
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
  const size_t shared = static_cast<size_t>(dh + 2 * ne + k + 1) * 4;
  MAGI2_CHECK(shared <= kMaxShared, "moe_route: ", dh, " head dims and ", ne, " experts exceed shared memory");
  if (t == 0) return;
  const int threads = ne >= 256 ? 256 : ((ne + 31) / 32) * 32;
  moe_route_kernel<<<blocks_of(t, mh, "moe_route"), threads, shared, s>>>(
      ptr<const uint16_t>(p.r), p.r.row_stride(), ptr<const float>(p.gate), ptr<const float>(p.bias),
      ptr<int32_t>(p.idx), ptr<float>(p.weight), p.forced_idx.defined() ? ptr<const int32_t>(p.forced_idx) : nullptr,
      p.margin.defined() ? ptr<float>(p.margin) : nullptr, t, mh, ne, k, dh, p.route_scale, p.normalize);
  MAGI2_CUDA_CHECK_LAUNCH("moe_route");
}

void moe_experts(const MoeExpertsParams& p, cudaStream_t s) {
  const int mh = p.num_heads, ne = p.num_experts, k = p.top_k;
  MAGI2_CHECK(mh > 0 && ne > 0 && k > 0 && k <= kMaxTopK, "moe_experts: bad head/expert/top-k counts");
  MAGI2_CHECK(p.r.defined() && p.r.dim() == 2, "moe_experts.r: expected a 2-D tensor");
  const int64_t t = p.r.size(0);
  const int64_t dh = p.r.size(1) / mh;
  check_2d(p.r, t, mh * dh, "moe_experts.r");
  check_2d(p.out, t, mh * dh, "moe_experts.out");
  MAGI2_CHECK(p.r.dtype() == DType::BF16 && p.out.dtype() == DType::BF16, "moe_experts: r and out must be bf16");
  const int64_t de = p.w_gate.dim() == 3 ? p.w_gate.size(2) : 0;
  const Shape up_shape{static_cast<int64_t>(mh) * ne, dh, de};
  check_dev(p.w_gate, DType::BF16, up_shape, "moe_mlp.W_gate");
  check_dev(p.w_up, DType::BF16, up_shape, "moe_mlp.W_up");
  check_dev(p.w_down, DType::BF16, Shape({static_cast<int64_t>(mh) * ne, de, dh}), "moe_mlp.W_down");
  const Shape route_shape{mh, t, k};
  check_dev(p.idx, DType::I32, route_shape, "moe_experts.idx");
  check_dev(p.weight, DType::F32, route_shape, "moe_experts.weight");
  const size_t shared = static_cast<size_t>(2 * dh + de) * 4;
  MAGI2_CHECK(shared <= kMaxShared, "moe_experts: ", dh, " head dims and ", de,
              " expert dims exceed shared memory");
  if (t == 0) return;
  moe_experts_kernel<<<blocks_of(t, mh, "moe_experts"), 256, shared, s>>>(
      ptr<const uint16_t>(p.r), p.r.row_stride(), ptr<const uint16_t>(p.w_gate), ptr<const uint16_t>(p.w_up),
      ptr<const uint16_t>(p.w_down), ptr<const int32_t>(p.idx), ptr<const float>(p.weight), ptr<uint16_t>(p.out),
      p.out.row_stride(), t, mh, ne, k, dh, de);
  MAGI2_CUDA_CHECK_LAUNCH("moe_experts");
}

}  // namespace magi2::cuda
