// CUDA sampler ops (sampler_ops.h): element-wise kernels over the latents,
// one thread per element in grid-stride loops. The formulas are ops/numerics.h,
// shared with the CPU backend; built with --fmad=false, so the bytes match.
#include <cstdint>

#include "cuda/cuda_common.h"
#include "cuda/sampler_ops.h"
#include "ops/numerics.h"

namespace magi2::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

float* f32_dev(const Tensor& t, const char* what) {
  MAGI2_CHECK(t.defined() && t.device() == Device::CUDA && t.dtype() == DType::F32 && t.is_contiguous(), what,
              ": expected a contiguous f32 CUDA tensor");
  return t.data_as<float>();
}

__global__ void copy_elems_kernel(const float* __restrict__ src, int64_t ns, float* __restrict__ dst, int64_t nd,
                                  const int32_t* __restrict__ si, const int32_t* __restrict__ di, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = si ? si[i] : i, d = di ? di[i] : i;
    if (s >= 0 && s < ns && d >= 0 && d < nd) dst[d] = src[s];
  }
}

__global__ void fill_rows_kernel(const float* __restrict__ table, int64_t table_rows, const int32_t* __restrict__ step,
                                 const int32_t* __restrict__ rows, int64_t n, float* __restrict__ out,
                                 int64_t out_rows, int64_t c) {
  const int32_t s = *step;
  if (s < 0 || s >= table_rows) return;
  const float* src = table + s * c;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n * c;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = rows[e / c];
    if (r >= 0 && r < out_rows) out[r * c + e % c] = src[e % c];
  }
}

__global__ void cfg_combine_kernel(const float* __restrict__ pred, float* __restrict__ v, int64_t n, float scale) {
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x)
    v[k] = cfg_combine_f32(pred[k], pred[n + k], scale);
}

__global__ void flow_unipc_kernel(float* __restrict__ x, const float* __restrict__ v, float* __restrict__ last,
                                  float* __restrict__ m0, float* __restrict__ m1, const float* __restrict__ coef,
                                  int64_t steps, const int32_t* __restrict__ step, int64_t n) {
  const int32_t s = *step;
  if (s < 0 || s >= steps) return;
  UniPcStepCoef c;
  const float* row = coef + static_cast<int64_t>(s) * 16;
  float* cf = reinterpret_cast<float*>(&c);
#pragma unroll
  for (int i = 0; i < 16; ++i) cf[i] = row[i];
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float xk = x[k], lk = last[k], a = m0[k], b = m1[k];
    flow_unipc_element(c, v[k], xk, lk, a, b);
    x[k] = xk;
    last[k] = lk;
    m0[k] = a;
    m1[k] = b;
  }
}

__global__ void advance_step_kernel(int32_t* step) { *step += 1; }

__global__ void nonfinite_kernel(const uint32_t* __restrict__ x, int64_t n, int32_t* first,
                                 const int32_t* __restrict__ step) {
  bool bad = false;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n && !bad;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x)
    bad = is_nonfinite_bits(x[k]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicMin(first, *step);
}

}  // namespace

void copy_elems(const CopyElemsParams& p, cudaStream_t s) {
  const float* src = f32_dev(p.src, "copy_elems.src");
  float* dst = f32_dev(p.dst, "copy_elems.dst");
  MAGI2_CHECK(p.src_index.defined() || p.dst_index.defined() || p.src.numel() == p.dst.numel(),
              "copy_elems: identity copy between tensors of different sizes");
  const int64_t n = p.src_index.defined() ? p.src_index.numel() : (p.dst_index.defined() ? p.dst_index.numel()
                                                                                          : p.src.numel());
  const int32_t* si =
      p.src_index.defined() ? check_index_on(Device::CUDA, p.src_index, n, "copy_elems.src_index") : nullptr;
  const int32_t* di =
      p.dst_index.defined() ? check_index_on(Device::CUDA, p.dst_index, n, "copy_elems.dst_index") : nullptr;
  if (n == 0) return;
  copy_elems_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, p.src.numel(), dst, p.dst.numel(), si, di, n);
  MAGI2_CUDA_CHECK_LAUNCH("copy_elems");
}

void fill_rows(const FillRowsParams& p, cudaStream_t s) {
  const float* table = f32_dev(p.table, "fill_rows.table");
  float* out = f32_dev(p.out, "fill_rows.out");
  MAGI2_CHECK(p.table.dim() == 2 && p.out.dim() == 2 && p.table.size(1) == p.out.size(1),
              "fill_rows: table ", shape_str(p.table.shape()), " and out ", shape_str(p.out.shape()),
              " must be 2-D of one width");
  const int32_t* step = check_index_on(Device::CUDA, p.step, 1, "fill_rows.step");
  const int64_t n = p.rows.numel(), c = p.out.size(1);
  const int32_t* rows = check_index_on(Device::CUDA, p.rows, n, "fill_rows.rows");
  if (n == 0 || c == 0) return;
  fill_rows_kernel<<<blocks_for(n * c), kThreads, 0, s>>>(table, p.table.size(0), step, rows, n, out, p.out.size(0), c);
  MAGI2_CUDA_CHECK_LAUNCH("fill_rows");
}

void cfg_combine(const CfgCombineParams& p, cudaStream_t s) {
  const float* pred = f32_dev(p.pred, "cfg_combine.pred");
  float* v = f32_dev(p.v, "cfg_combine.v");
  const int64_t n = p.v.numel();
  MAGI2_CHECK(p.pred.numel() == 2 * n, "cfg_combine: pred has ", p.pred.numel(), " elements, expected 2 x ", n);
  if (n == 0) return;
  cfg_combine_kernel<<<blocks_for(n), kThreads, 0, s>>>(pred, v, n, p.scale);
  MAGI2_CUDA_CHECK_LAUNCH("cfg_combine");
}

void flow_unipc_step(const FlowUniPCStepParams& p, cudaStream_t s) {
  float* x = f32_dev(p.sample, "flow_unipc_step.sample");
  const float* v = f32_dev(p.v, "flow_unipc_step.v");
  float* last = f32_dev(p.last, "flow_unipc_step.last");
  float* m0 = f32_dev(p.m0, "flow_unipc_step.m0");
  float* m1 = f32_dev(p.m1, "flow_unipc_step.m1");
  const float* coef = f32_dev(p.coef, "flow_unipc_step.coef");
  const int64_t n = p.sample.numel();
  for (const Tensor* t : {&p.v, &p.last, &p.m0, &p.m1})
    MAGI2_CHECK(t->numel() == n, "flow_unipc_step: state tensors must all have ", n, " elements");
  MAGI2_CHECK(p.coef.dim() == 2 && p.coef.size(1) == 16, "flow_unipc_step.coef: expected [S, 16] f32");
  const int32_t* step = check_index_on(Device::CUDA, p.step, 1, "flow_unipc_step.step");
  if (n == 0) return;
  flow_unipc_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, v, last, m0, m1, coef, p.coef.size(0), step, n);
  MAGI2_CUDA_CHECK_LAUNCH("flow_unipc_step");
}

void advance_step(const AdvanceStepParams& p, cudaStream_t s) {
  int32_t* step = const_cast<int32_t*>(check_index_on(Device::CUDA, p.step, 1, "advance_step.step"));
  advance_step_kernel<<<1, 1, 0, s>>>(step);
  MAGI2_CUDA_CHECK_LAUNCH("advance_step");
}

void nonfinite_check(const NonfiniteCheckParams& p, cudaStream_t s) {
  const float* x = f32_dev(p.x, "nonfinite_check.x");
  MAGI2_CHECK(p.slot >= 0 && p.first.defined() && p.first.numel() > p.slot, "nonfinite_check: slot ", p.slot,
              " outside `first`");
  int32_t* first =
      const_cast<int32_t*>(check_index_on(Device::CUDA, p.first, p.first.numel(), "nonfinite_check.first"));
  const int32_t* step = check_index_on(Device::CUDA, p.step, 1, "nonfinite_check.step");
  const int64_t n = p.x.numel();
  if (n == 0) return;
  nonfinite_kernel<<<blocks_for(n), kThreads, 0, s>>>(reinterpret_cast<const uint32_t*>(x), n, first + p.slot, step);
  MAGI2_CUDA_CHECK_LAUNCH("nonfinite_check");
}

}  // namespace magi2::cuda
