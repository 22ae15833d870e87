// The FP8 linears' activation quantiser (LinearParams::w_scale, docs/fp8.md):
// x bf16 [rows, k] (row stride ldx) -> e4m3 [rows, k] and one f32 scale per
// row and 1 x 128 group, with the shared rule (fp8_quant.cuh), so the bytes
// match the CPU reference's (cpu/linear_fp8.cpp); the scales row-major for the
// CUTLASS GEMM or per row group K-block-major for cuBLASLt (Fp8ScaleLayout).
// Memory-bound: one warp per row and up to 4 groups, 8 bytes read and 4 written
// a lane per group.
#include "cuda/linear_fp8.h"

#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/fp8_quant.cuh"

namespace magi2::cuda {

namespace {

constexpr int kWarps = 8;

// One warp quantises G consecutive groups of one row: all G loads are issued
// before the first group's reductions (the latency of one row's reads is paid
// once, as in the attention quantiser).
template <int G>
__global__ void __launch_bounds__(kWarps * 32)
    quantize_rows_kernel(const uint16_t* __restrict__ x, int64_t ldx, int64_t rows, int64_t k,
                         uint8_t* __restrict__ xq, float* __restrict__ xs, Fp8ScaleLayout layout) {
  const int64_t groups = k / kFp8ActGroup, units = groups / G;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (w >= rows * units) return;
  const int64_t r = w / units, g0 = (w % units) * G;
  uint2 raw[G];
#pragma unroll
  for (int j = 0; j < G; ++j)
    raw[j] = *reinterpret_cast<const uint2*>(x + r * ldx + (g0 + j) * kFp8ActGroup + lane * 4);
  // The scale of group g sits at base + g * step.
  int64_t base = r * groups, step = 1;
  if (layout.groups > 0) {
    int gi = 0;
    while (gi + 1 < layout.groups && r >= layout.cu[gi + 1]) ++gi;
    base = layout.off[gi] + (r - layout.cu[gi]);
    step = layout.cu[gi + 1] - layout.cu[gi];
  }
#pragma unroll
  for (int j = 0; j < G; ++j) {
    const float v[4] = {dev::bf16_to_f32(static_cast<uint16_t>(raw[j].x & 0xffffu)),
                        dev::bf16_to_f32(static_cast<uint16_t>(raw[j].x >> 16)),
                        dev::bf16_to_f32(static_cast<uint16_t>(raw[j].y & 0xffffu)),
                        dev::bf16_to_f32(static_cast<uint16_t>(raw[j].y >> 16))};
    const uint32_t q = dev::fp8_quantize4(v, xs + base + (g0 + j) * step, lane);
    *reinterpret_cast<uint32_t*>(xq + r * k + (g0 + j) * kFp8ActGroup + lane * 4) = q;
  }
}

template <int G>
void launch_quantize(const uint16_t* x, int64_t ldx, int64_t rows, int64_t k, uint8_t* xq, float* xs,
                     const Fp8ScaleLayout& layout, cudaStream_t s) {
  const int64_t warps = rows * (k / kFp8ActGroup / G);
  quantize_rows_kernel<G><<<static_cast<unsigned>((warps + kWarps - 1) / kWarps), kWarps * 32, 0, s>>>(
      x, ldx, rows, k, xq, xs, layout);
}

// One thread per (row, K-block), rows fastest: the stores of a warp are
// contiguous in every layout (a group's scales are [kb, rows_g], rows fastest).
__global__ void regroup_scales_kernel(const float* __restrict__ src, int64_t lds, int64_t rows, int64_t kb,
                                      float* __restrict__ dst, Fp8ScaleLayout layout) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= rows * kb) return;
  const int64_t b = e / rows, r = e % rows;
  int64_t at = r * kb + b;
  if (layout.groups > 0) {
    int gi = 0;
    while (gi + 1 < layout.groups && r >= layout.cu[gi + 1]) ++gi;
    at = layout.off[gi] + b * (layout.cu[gi + 1] - layout.cu[gi]) + (r - layout.cu[gi]);
  }
  dst[at] = src[r * lds + b];
}

}  // namespace

void regroup_fp8_scales(const float* xs_rows, int64_t lds, int64_t rows, int64_t kb, float* dst,
                        const Fp8ScaleLayout& layout, cudaStream_t s) {
  MAGI2_CHECK(layout.groups >= 0 && layout.groups <= 3 &&
                  (layout.groups == 0 || (layout.cu[0] == 0 && layout.cu[layout.groups] == rows)),
              "FP8 scale regroup: the scale layout's ", layout.groups, " row groups do not cover the ", rows,
              " rows");
  const int64_t n = rows * kb;
  if (n == 0) return;
  constexpr int kBlock = 256;
  regroup_scales_kernel<<<static_cast<unsigned>((n + kBlock - 1) / kBlock), kBlock, 0, s>>>(xs_rows, lds, rows, kb,
                                                                                            dst, layout);
  MAGI2_CUDA_CHECK_LAUNCH("regroup_fp8_scales");
}

void quantize_fp8_rows_of(const Tensor& y, const Fp8Rows& y8, cudaStream_t s, const char* what) {
  MAGI2_CHECK(y8.q.is_contiguous() && y8.scale.is_contiguous(), "CUDA backend: ", what,
              ": FP8 rows written in a second pass must be contiguous");
  quantize_rows_fp8(y.data_as<uint16_t>(), y.row_stride(), y.size(0), y.size(1), y8.q.data_as<uint8_t>(),
                    y8.scale.data_as<float>(), s);
}

void quantize_rows_fp8(const uint16_t* x, int64_t ldx, int64_t rows, int64_t k, uint8_t* xq, float* xs,
                       cudaStream_t s, const Fp8ScaleLayout& layout) {
  MAGI2_CHECK(k % kFp8ActGroup == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 8 == 0,
              "FP8 activation quantiser: needs k a multiple of ", kFp8ActGroup,
              " and 8-byte aligned rows (k ", k, ", row stride ", ldx, ")");
  MAGI2_CHECK(layout.groups >= 0 && layout.groups <= 3 &&
                  (layout.groups == 0 || (layout.cu[0] == 0 && layout.cu[layout.groups] == rows)),
              "FP8 activation quantiser: the scale layout's ", layout.groups, " row groups do not cover the ", rows,
              " rows");
  const int64_t groups = k / kFp8ActGroup;
  if (rows * groups == 0) return;
  if (groups % 4 == 0)
    launch_quantize<4>(x, ldx, rows, k, xq, xs, layout, s);
  else if (groups % 2 == 0)
    launch_quantize<2>(x, ldx, rows, k, xq, xs, layout, s);
  else
    launch_quantize<1>(x, ldx, rows, k, xq, xs, layout, s);
  MAGI2_CUDA_CHECK_LAUNCH("quantize_rows_fp8");
}

}  // namespace magi2::cuda
