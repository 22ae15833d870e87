// RoPE on the CUDA backend: the element-wise Fourier table (spec magi2-dit.md
// §4.4) and the half-split rotary fused with un-permuting rows (§4.5, §6 step
// 6). Same fp32 operations in the same order as src/cpu/rope.cpp (built with
// --fmad=false), so rope is bit-identical; the table's sin/cos are evaluated
// in double and rounded to fp32 (correctly rounded), where glibc's sinf/cosf
// are within 1 ulp of that value (docs/cuda.md measures how often they differ).
#include <cmath>
#include <cstdint>

#include "cuda/attn_ops.h"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"

namespace magi2::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

// One thread per (token, axis, band): writes the sin and the cos entry.
__global__ void rope_table_kernel(const float* __restrict__ coords, int64_t ldc, const float* __restrict__ bands,
                                  int64_t nb, float* __restrict__ out, int64_t ldo, int64_t t) {
  const int64_t n_all = t * 3 * nb;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n_all;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = e / (3 * nb), a = (e / nb) % 3, b = e % nb;
    const float* c = coords + n * ldc;
    const float size = c[3 + a], ref = c[6 + a];
    float scale = (ref - 1.0f) / (size - 1.0f);
    if (ref == 1.0f && size == 1.0f) scale = 1.0f;
    if (!isfinite(scale)) scale = 0.0f;
    const float center = a == 0 ? 0.0f : (size - 1.0f) / 2.0f;
    const float x = c[a] - center;
    const double theta = static_cast<double>((x * scale) * bands[b]);
    float* o = out + n * ldo;
    o[a * nb + b] = static_cast<float>(sin(theta));
    o[3 * nb + a * nb + b] = static_cast<float>(cos(theta));
  }
}

// One thread per output element of [T, H, hd]; the pair partner is read again
// (cheap) so every element is independent.
__global__ void rope_kernel(const float* __restrict__ x, const float* __restrict__ table, int64_t ldt,
                            uint16_t* __restrict__ out, const int32_t* __restrict__ src_rows, int64_t t, int64_t h,
                            int64_t hd, int64_t half) {
  const int64_t n_all = t * h * hd;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n_all;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = e / (h * hd), k = (e / hd) % h, i = e % hd;
    int64_t sr = src_rows ? src_rows[n] : n;
    if (sr < 0 || sr >= t) sr = n;  // no host check on the device path: a bad source row reads its own row
    const float* xr = x + (sr * h + k) * hd;
    const float* sn = table + n * ldt;
    const float* cs = sn + half;
    float y;
    if (i < half) {
      const float a = xr[i] * cs[i];
      const float b = (-xr[i + half]) * sn[i];
      y = a + b;
    } else if (i < 2 * half) {
      const int64_t j = i - half;
      const float c = xr[i] * cs[j];
      const float d = xr[j] * sn[j];
      y = c + d;
    } else {
      y = xr[i];
    }
    out[e] = dev::f32_to_bf16(y);
  }
}

}  // namespace

void rope_table(const RopeTableParams& p, cudaStream_t s) {
  MAGI2_CHECK(p.coords.defined() && p.bands.defined() && p.out.defined(), "rope_table: a tensor is missing");
  const int64_t t = p.coords.size(0);
  const int64_t nb = p.bands.numel();
  check_2d(p.coords, t, 9, "rope_table.coords");
  check_2d(p.out, t, 6 * nb, "rope_table.out");
  MAGI2_CHECK(p.bands.device() == Device::CUDA && p.bands.is_contiguous(),
              "rope_table.bands: expected a contiguous CUDA tensor");
  MAGI2_CHECK(p.coords.dtype() == DType::F32 && p.bands.dtype() == DType::F32 && p.out.dtype() == DType::F32,
              "rope_table: expected f32 coords, bands and output");
  if (t == 0 || nb == 0) return;
  rope_table_kernel<<<blocks_for(t * 3 * nb), kThreads, 0, s>>>(p.coords.data_as<float>(), p.coords.row_stride(),
                                                                 p.bands.data_as<float>(), nb, p.out.data_as<float>(),
                                                                 p.out.row_stride(), t);
  MAGI2_CUDA_CHECK_LAUNCH("rope_table");
}

void rope(const RopeParams& p, cudaStream_t s) {
  MAGI2_CHECK(p.x.defined() && p.x.device() == Device::CUDA && p.x.dim() == 3 && p.x.is_contiguous() &&
                  p.x.dtype() == DType::F32,
              "rope.x: expected contiguous f32 [T, H, hd] on the GPU");
  const int64_t t = p.x.size(0), h = p.x.size(1), hd = p.x.size(2);
  MAGI2_CHECK(p.out.defined() && p.out.device() == Device::CUDA && p.out.dim() == 3 && p.out.size(0) == t &&
                  p.out.size(1) == h && p.out.size(2) == hd && p.out.is_contiguous() && p.out.dtype() == DType::BF16,
              "rope.out: expected contiguous bf16 ", shape_str({t, h, hd}));
  MAGI2_CHECK(p.table.defined() && p.table.dim() == 2, "rope.table: expected a 2-D tensor");
  const int64_t half = p.table.size(1) / 2;  // rotary_dim / 2
  check_2d(p.table, t, 2 * half, "rope.table");
  MAGI2_CHECK(p.table.dtype() == DType::F32, "rope.table: expected f32");
  MAGI2_CHECK(2 * half <= hd, "rope: rotary dim ", 2 * half, " exceeds head dim ", hd);
  const int32_t* d_rows =
      p.src_rows.defined() ? check_index_on(Device::CUDA, p.src_rows, t, "rope.src_rows") : nullptr;
  if (t == 0 || h == 0 || hd == 0) return;
  rope_kernel<<<blocks_for(t * h * hd), kThreads, 0, s>>>(p.x.data_as<float>(), p.table.data_as<float>(),
                                                           p.table.row_stride(), p.out.data_as<uint16_t>(), d_rows, t,
                                                           h, hd, half);
  MAGI2_CUDA_CHECK_LAUNCH("rope");
}

}  // namespace magi2::cuda
