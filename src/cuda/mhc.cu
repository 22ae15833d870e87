// mHC kernels of the CUDA backend (spec magi2-dit.md §9): logits, H_pre with
// the branch input, and H_post / Sinkhorn H_res with the in-place state
// update. Each does the CPU reference's fp32 operations (src/cpu/mhc.cpp) in
// the same order, so outputs match it bit for bit: the RMSNorm and the 24
// logit dot products use the 16-lane order of dot_f32 (one lane per partial
// sum), the Sinkhorn iterations run serially per token with the CPU's sum
// orders, and exp is evaluated in double and rounded (device_fp.cuh). The
// alpha/bias scalars are read on the device, so no op waits for the host.
#include <cstdint>

#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/fused_kernels.h"
#include "cuda/mhc_coef.cuh"
#include "cuda/mhc_moe.h"

namespace magi2::cuda {

namespace {

using namespace dev;

constexpr int kStreams = 4;
constexpr int kLogits = 2 * kStreams + kStreams * kStreams;  // 24
constexpr int kRowThreads = 256;

// A half-warp per token, kLogitTokens tokens a block. Lane j sums the
// elements i = j (mod 16) in increasing i, as dot_f32: first x^2 for the
// RMSNorm, then all 24 logits at once from the normalised element (the same
// fp32 ops as the CPU's in-place rms_normalize) times phi rows staged in
// shared memory kLogitChunk at a time (read once per block, not per token and
// logit). Both sums end in dot_f32's tree (half_warp_tree).
constexpr int kLogitTokens = 16;
constexpr int kLogitChunk = 256;       // a multiple of 16 keeps each lane's i = j (mod 16)
constexpr int kPhiLd = kLogits + 1;    // 25: the 16 lanes' rows fall in distinct banks
__global__ void __launch_bounds__(kLogitTokens * 16)
    mhc_logits_kernel(const uint16_t* __restrict__ state, int64_t lds, const float* __restrict__ w,
                      const float* __restrict__ phi, float* __restrict__ logits, int64_t ldl, int64_t vw, int4 cu,
                      int groups, float eps, int64_t t) {
  __shared__ float ps[kLogitChunk * kPhiLd];
  const int lane = threadIdx.x & 15;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kLogitTokens + (threadIdx.x >> 4);
  const bool live = r < t;
  const uint16_t* x = state + (live ? r : 0) * lds;
  float acc = 0.f;
  if (live) {
    for (int64_t i = lane; i < vw; i += 16) {
      const float v = bf16_to_f32(x[i]);
      acc += v * v;
    }
  }
  acc = half_warp_tree(acc);
  const float ms = acc * (1.0f / static_cast<float>(vw));
  const float rs = __shfl_sync(0xffffffffu, 1.0f / sqrtf(ms + eps), 0, 16);  // lane 0's value
  const float* wm = w + static_cast<int64_t>(live ? group_of(cu, groups, r) : 0) * vw;
  float l[kLogits];
#pragma unroll
  for (int c = 0; c < kLogits; ++c) l[c] = 0.f;
  for (int64_t i0 = 0; i0 < vw; i0 += kLogitChunk) {
    const int rows = static_cast<int>(vw - i0 < kLogitChunk ? vw - i0 : kLogitChunk);
    __syncthreads();  // the previous chunk is consumed
    for (int q = threadIdx.x; q < rows * kLogits; q += blockDim.x)
      ps[(q / kLogits) * kPhiLd + q % kLogits] = phi[i0 * kLogits + q];
    __syncthreads();
    if (!live) continue;
    for (int ii = lane; ii < rows; ii += 16) {
      const int64_t i = i0 + ii;
      const float n = (bf16_to_f32(x[i]) * rs) * (wm[i] + 1.0f);
      const float* pr = ps + ii * kPhiLd;
#pragma unroll
      for (int c = 0; c < kLogits; ++c) l[c] += n * pr[c];
    }
  }
#pragma unroll
  for (int c = 0; c < kLogits; ++c) {
    const float v = half_warp_tree(l[c]);
    if (live && lane == 0) logits[r * ldl + c] = v;
  }
}

// One block per token: threads 0..3 form H_pre, then all threads mix the streams.
__global__ void mhc_pre_kernel(const uint16_t* __restrict__ state, int64_t lds, const float* __restrict__ logits,
                               int64_t ldl, const float* __restrict__ alpha, const float* __restrict__ bias, float c,
                               uint16_t* __restrict__ a, int64_t lda, float* __restrict__ h_pre, int64_t ldh,
                               int64_t d) {
  __shared__ float h[kStreams];
  const int64_t r = blockIdx.x;
  if (threadIdx.x < kStreams) {
    const int i = threadIdx.x;
    const float ac = alpha[0] * c;
    h[i] = round_bf16(sigmoid_f32(ac * logits[r * ldl + i] + bias[i]));
    if (h_pre != nullptr) h_pre[r * ldh + i] = h[i];
  }
  __syncthreads();
  const uint16_t* s = state + r * lds;
  for (int64_t col = threadIdx.x; col < d; col += blockDim.x) {
    float acc = 0.f;
    for (int i = 0; i < kStreams; ++i) acc += h[i] * bf16_to_f32(s[i * d + col]);
    a[r * lda + col] = f32_to_bf16(acc);
  }
}

// One block per token: thread 0 forms H_post and runs Sinkhorn on the 4x4
// matrix (serial: 20 iterations of 32 divisions), then all threads update the
// state columns in place (each thread owns a column across the 4 streams).
__global__ void mhc_post_res_kernel(uint16_t* state, int64_t lds, const uint16_t* __restrict__ o, int64_t ldo,
                                    const float* __restrict__ logits, int64_t ldl, const float* __restrict__ alpha_post,
                                    const float* __restrict__ alpha_res, const float* __restrict__ b_post,
                                    const float* __restrict__ b_res, float c, int iters, float sk_eps,
                                    float* __restrict__ h_post, int64_t ldhp, float* __restrict__ h_res,
                                    int64_t ldhr, int64_t d) {
  __shared__ float hp[kStreams];
  __shared__ float m[kStreams][kStreams];
  const int64_t r = blockIdx.x;
  if (threadIdx.x == 0) {
    float mm[kStreams][kStreams];
    mhc_post_coefs(logits + r * ldl, alpha_post[0] * c, alpha_res[0] * c, b_post, b_res, iters, sk_eps,
                   [](float x) { return exp_f32(x); }, hp, mm);
    for (int i = 0; i < kStreams; ++i)
      for (int j = 0; j < kStreams; ++j) {
        m[i][j] = mm[i][j];
        if (h_res != nullptr) h_res[r * ldhr + 4 * i + j] = m[i][j];
      }
    if (h_post != nullptr)
      for (int i = 0; i < kStreams; ++i) h_post[r * ldhp + i] = hp[i];
  }
  __syncthreads();
  uint16_t* s = state + r * lds;
  const uint16_t* orow = o + r * ldo;
  for (int64_t col = threadIdx.x; col < d; col += blockDim.x) {
    float old[kStreams];
    for (int j = 0; j < kStreams; ++j) old[j] = bf16_to_f32(s[j * d + col]);
    const float oc = bf16_to_f32(orow[col]);
    // One fp32 accumulation of the 4-term mix plus the post term, one rounding (as the CPU).
    for (int i = 0; i < kStreams; ++i) {
      float acc = 0.f;
      for (int j = 0; j < kStreams; ++j) acc += m[i][j] * old[j];
      acc += hp[i] * oc;
      s[i * d + col] = f32_to_bf16(acc);
    }
  }
}

// A warp per row: ss[r] = the fp32 sum of x^2 over the bf16 row (lane j takes
// columns j, j + 32, ..., then the shuffle tree). What mhc_post_res hands the
// next logits (MhcPostResParams::ss) where its kernel does not sum in place.
__global__ void row_sum_squares_kernel(const uint16_t* __restrict__ x, int64_t ldx, int64_t w, float* __restrict__ ss,
                                       int64_t t) {
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (r >= t) return;
  float acc = 0.f;
  for (int64_t i = lane; i < w; i += 32) {
    const float v = bf16_to_f32(x[r * ldx + i]);
    acc += v * v;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) ss[r] = acc;
}

// A device f32 tensor of n values (weights and scalars stay on the device).
const float* dev_f32(const Tensor& t, int64_t n, const char* what) {
  MAGI2_CHECK(t.defined() && t.device() == Device::CUDA && t.dtype() == DType::F32 && t.numel() == n &&
                  t.is_contiguous(),
              what, ": expected ", n, " contiguous f32 values on the device");
  return static_cast<const float*>(t.data());
}

unsigned grid_of(int64_t rows, const char* what) {
  MAGI2_CHECK(rows < (int64_t{1} << 31), what, ": too many rows for one launch (", rows, ")");
  return static_cast<unsigned>(rows);
}

}  // namespace

void mhc_logits(const MhcLogitsParams& p, cudaStream_t s, const FusedPaths* fast) {
  MAGI2_CHECK(p.state.defined() && p.state.dim() == 2, "mhc_logits.state: expected a 2-D tensor");
  const int64_t t = p.state.size(0), vw = p.state.size(1);
  check_2d(p.state, t, vw, "mhc_logits.state");
  check_2d(p.logits, t, kLogits, "mhc_logits.logits");
  check_groups(p.groups, t, "mhc_logits");
  MAGI2_CHECK(p.state.dtype() == DType::BF16 && p.logits.dtype() == DType::F32, "mhc_logits: dtypes");
  const float* w = dev_f32(p.norm_w, vw * p.groups.count, "mhc_norm.weight");
  MAGI2_CHECK(p.phi.device() == Device::CUDA && p.phi.dtype() == DType::F32 && p.phi.shape() == Shape({vw, kLogits}) &&
                  p.phi.is_contiguous(),
              "mhc phi: expected contiguous [", vw, ", 24] f32 on the device, got ", shape_str(p.phi.shape()));
  MAGI2_CHECK(!p.ss.defined() || (p.ss.device() == Device::CUDA && p.ss.dtype() == DType::F32 &&
                                   p.ss.numel() == t && p.ss.is_contiguous()),
              "mhc_logits.ss: expected ", t, " contiguous f32 values on the device");
  if (t == 0) return;
  if (fast != nullptr && fast->mhc && fast->scratch != nullptr && mhc_logits_pass(p, *fast->scratch, s)) return;
  if (fast != nullptr && fast->mhc && p.ss.defined() && fast->linear != nullptr && mhc_logits_gemm(p, *fast, s))
    return;
  if (fast != nullptr && fast->mhc && mhc_logits_fused(p, *fast->scratch, s)) return;
  mhc_logits_kernel<<<grid_of((t + kLogitTokens - 1) / kLogitTokens, "mhc_logits"), kLogitTokens * 16, 0, s>>>(
      static_cast<const uint16_t*>(p.state.data()), p.state.row_stride(), w, static_cast<const float*>(p.phi.data()),
      static_cast<float*>(p.logits.data()), p.logits.row_stride(), vw, cu_of(p.groups), p.groups.count, p.eps, t);
  MAGI2_CUDA_CHECK_LAUNCH("mhc_logits");
}

void mhc_pre(const MhcPreParams& p, cudaStream_t s, const FusedPaths* fast) {
  MAGI2_CHECK(p.w != nullptr, "mhc_pre: weights missing");
  MAGI2_CHECK(p.state.defined() && p.state.dim() == 2, "mhc_pre.state: expected a 2-D tensor");
  const int64_t t = p.state.size(0), vw = p.state.size(1), d = vw / kStreams;
  MAGI2_CHECK(vw % kStreams == 0, "mhc_pre.state: ", vw, " columns are not 4 streams");
  check_2d(p.state, t, vw, "mhc_pre.state");
  check_2d(p.logits, t, kLogits, "mhc_pre.logits");
  const Tensor& a = mhc_pre_rows(p);  // a, or norm.y (normalised in place after the pre-mix)
  check_2d(a, t, d, p.a.defined() || !p.norm.y.defined() ? "mhc_pre.a" : "mhc_pre.norm.y");
  if (p.h_pre.defined()) check_2d(p.h_pre, t, kStreams, "mhc_pre.h_pre");
  MAGI2_CHECK(p.state.dtype() == DType::BF16 && p.logits.dtype() == DType::F32 && a.dtype() == DType::BF16 &&
                  (!p.h_pre.defined() || p.h_pre.dtype() == DType::F32),
              "mhc_pre: expected bf16 state and a, f32 logits and h_pre");
  const RmsNormParams& n = p.norm;
  if (n.y.defined()) {  // rms_norm's checks, before any launch (the fused path does not reach rms_norm)
    check_2d(n.y, t, d, "mhc_pre.norm.y");
    check_groups(n.groups, t, "mhc_pre.norm");
    MAGI2_CHECK(n.heads == 1 && n.y.dtype() == DType::BF16, "mhc_pre.norm: needs a bf16 y and one head a row");
    MAGI2_CHECK(n.w.defined() && n.w.device() == Device::CUDA && n.w.dtype() == DType::F32 &&
                    n.w.numel() == d * n.groups.count,
                "mhc_pre.norm.w: expected ", d * n.groups.count, " f32 values on the device");
    if (n.y8.defined()) check_fp8_rows(Device::CUDA, n.y8, t, d, "mhc_pre.norm.y8");
  }
  const float* alpha = dev_f32(p.w->alpha_pre, 1, "mhc_alpha_pre");
  const float* bias = dev_f32(p.w->bias_pre, kStreams, "mhc_bias_pre");
  if (t == 0) return;
  if (fast != nullptr && fast->mhc && mhc_pre_fused(p, s)) return;
  mhc_pre_kernel<<<grid_of(t, "mhc_pre"), kRowThreads, 0, s>>>(
      static_cast<const uint16_t*>(p.state.data()), p.state.row_stride(), static_cast<const float*>(p.logits.data()),
      p.logits.row_stride(), alpha, bias, p.c, static_cast<uint16_t*>(a.data()), a.row_stride(),
      p.h_pre.defined() ? static_cast<float*>(p.h_pre.data()) : nullptr,
      p.h_pre.defined() ? p.h_pre.row_stride() : 0, d);
  MAGI2_CUDA_CHECK_LAUNCH("mhc_pre");
  if (n.y.defined()) rms_norm(mhc_pre_norm(p), s);
}

void mhc_post_res(const MhcPostResParams& p, cudaStream_t s, const FusedPaths* fast) {
  MAGI2_CHECK(p.w != nullptr, "mhc_post_res: weights missing");
  MAGI2_CHECK(p.state.defined() && p.state.dim() == 2, "mhc_post_res.state: expected a 2-D tensor");
  const int64_t t = p.state.size(0), vw = p.state.size(1), d = vw / kStreams;
  MAGI2_CHECK(vw % kStreams == 0, "mhc_post_res.state: ", vw, " columns are not 4 streams");
  check_2d(p.state, t, vw, "mhc_post_res.state");
  check_2d(p.o, t, d, "mhc_post_res.o");
  check_2d(p.logits, t, kLogits, "mhc_post_res.logits");
  if (p.h_post.defined()) check_2d(p.h_post, t, kStreams, "mhc_post_res.h_post");
  if (p.h_res.defined()) check_2d(p.h_res, t, kStreams * kStreams, "mhc_post_res.h_res");
  MAGI2_CHECK(p.state.dtype() == DType::BF16 && p.o.dtype() == DType::BF16 && p.logits.dtype() == DType::F32 &&
                  (!p.h_post.defined() || p.h_post.dtype() == DType::F32) &&
                  (!p.h_res.defined() || p.h_res.dtype() == DType::F32),
              "mhc_post_res: expected bf16 state and o, f32 logits, h_post and h_res");
  const float* alpha_post = dev_f32(p.w->alpha_post, 1, "mhc_alpha_post");
  const float* alpha_res = dev_f32(p.w->alpha_res, 1, "mhc_alpha_res");
  const float* b_post = dev_f32(p.w->bias_post, kStreams, "mhc_bias_post");
  const float* b_res = dev_f32(p.w->bias_res, kStreams * kStreams, "mhc_bias_res");
  MAGI2_CHECK(!p.ss.defined() || (p.ss.device() == Device::CUDA && p.ss.dtype() == DType::F32 &&
                                   p.ss.numel() == t && p.ss.is_contiguous()),
              "mhc_post_res.ss: expected ", t, " contiguous f32 values on the device");
  const bool next = p.next.logits.defined();
  check_mhc_next(Device::CUDA, p, t, vw);  // before any launch
  if (t == 0) return;
  if (next && fast != nullptr && fast->mhc && fast->scratch != nullptr &&
      mhc_post_logits_fused(p, *fast->scratch, s))
    return;
  // Otherwise the update, then the logits as their own op (from the sums of squares where the update writes them).
  if (next) {
    MhcPostResParams q = p;
    q.next = {};
    mhc_post_res(q, s, fast);
    MhcLogitsParams n = mhc_next_logits(p);
    n.ss = p.ss;
    mhc_logits(n, s, fast);
    return;
  }
  auto* ss = p.ss.defined() ? static_cast<float*>(p.ss.data()) : nullptr;
  // The lean kernel sums the new rows' squares as it writes them; the others leave them to a row pass.
  auto sum_rows = [&] {
    if (ss == nullptr) return;
    row_sum_squares_kernel<<<grid_of((t + 7) / 8, "mhc_post_res ss"), 256, 0, s>>>(
        static_cast<const uint16_t*>(p.state.data()), p.state.row_stride(), vw, ss, t);
    MAGI2_CUDA_CHECK_LAUNCH("mhc_post_res ss");
  };
  if (fast != nullptr && fast->mhc && mhc_post_res_fused(p, s, fast->mhc_post)) {
    if (fast->mhc_post != MhcPostKernel::kLean) sum_rows();
    return;
  }
  mhc_post_res_kernel<<<grid_of(t, "mhc_post_res"), kRowThreads, 0, s>>>(
      static_cast<uint16_t*>(p.state.data()), p.state.row_stride(), static_cast<const uint16_t*>(p.o.data()),
      p.o.row_stride(), static_cast<const float*>(p.logits.data()), p.logits.row_stride(), alpha_post, alpha_res,
      b_post, b_res, p.c, p.sinkhorn_iters, p.sinkhorn_eps,
      p.h_post.defined() ? static_cast<float*>(p.h_post.data()) : nullptr,
      p.h_post.defined() ? p.h_post.row_stride() : 0,
      p.h_res.defined() ? static_cast<float*>(p.h_res.data()) : nullptr, p.h_res.defined() ? p.h_res.row_stride() : 0,
      d);
  MAGI2_CUDA_CHECK_LAUNCH("mhc_post_res");
  sum_rows();
}

}  // namespace magi2::cuda
