// The FP8 linears' activation quantiser (LinearParams::w_scale, docs/fp8.md):
// x bf16 [rows, k] (row stride ldx) -> e4m3 [rows, k] and one f32 scale per
// row and 1 x 128 group, with the shared rule (fp8_quant.cuh), so the bytes
// match the CPU reference's (cpu/linear_fp8.cpp). Memory-bound: one warp per
// (row, group), 8 bytes read and 4 written a lane.
#include "cuda/linear_fp8.h"

#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/fp8_quant.cuh"

namespace magi2::cuda {

namespace {

constexpr int kWarps = 8;

__global__ void __launch_bounds__(kWarps * 32)
    quantize_rows_kernel(const uint16_t* __restrict__ x, int64_t ldx, int64_t rows, int64_t k,
                         uint8_t* __restrict__ xq, float* __restrict__ xs) {
  const int64_t groups = k / kFp8ActGroup;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (w >= rows * groups) return;
  const int64_t r = w / groups, g = w % groups, c = g * kFp8ActGroup + lane * 4;
  const uint2 raw = *reinterpret_cast<const uint2*>(x + r * ldx + c);
  const float v[4] = {dev::bf16_to_f32(static_cast<uint16_t>(raw.x & 0xffffu)),
                      dev::bf16_to_f32(static_cast<uint16_t>(raw.x >> 16)),
                      dev::bf16_to_f32(static_cast<uint16_t>(raw.y & 0xffffu)),
                      dev::bf16_to_f32(static_cast<uint16_t>(raw.y >> 16))};
  const uint32_t q = dev::fp8_quantize4(v, xs + r * groups + g, lane);
  *reinterpret_cast<uint32_t*>(xq + r * k + c) = q;
}

}  // namespace

void quantize_rows_fp8(const uint16_t* x, int64_t ldx, int64_t rows, int64_t k, uint8_t* xq, float* xs,
                       cudaStream_t s) {
  MAGI2_CHECK(k % kFp8ActGroup == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 8 == 0,
              "FP8 activation quantiser: needs k a multiple of ", kFp8ActGroup,
              " and 8-byte aligned rows (k ", k, ", row stride ", ldx, ")");
  const int64_t warps = rows * (k / kFp8ActGroup);
  if (warps == 0) return;
  quantize_rows_kernel<<<static_cast<unsigned>((warps + kWarps - 1) / kWarps), kWarps * 32, 0, s>>>(x, ldx, rows, k,
                                                                                                   xq, xs);
  MAGI2_CUDA_CHECK_LAUNCH("quantize_rows_fp8");
}

}  // namespace magi2::cuda
