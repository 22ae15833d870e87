// The FP8 linears' activation quantiser (linear_fp8.cu). Internal to src/cuda/.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/ops.h"

namespace magi2::cuda {

/// Where quantize_rows_fp8 stores the scale of row r's K-block b (kb = k / 128
/// blocks a row). groups == 0: row-major xs[r * kb + b] (the CUTLASS GEMM's
/// layout). groups > 0: the rows form `groups` row groups (cu[0] = 0 <= ... <=
/// cu[groups] = rows), and group g's scales are one compact [kb, rows_g] block
/// at xs + off[g], rows fastest: xs[off[g] + b * rows_g + (r - cu[g])]
/// (cuBLASLt's CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F layout of one matmul's
/// B operand, as PyTorch's 1 x 128 blockwise scaled_mm passes it).
struct Fp8ScaleLayout {
  int groups = 0;
  int64_t cu[4] = {};
  int64_t off[3] = {};
};

/// Enqueues on `s`: x bf16 [rows, k] (row stride ldx elements) -> xq e4m3
/// [rows, k] (contiguous) and xs f32, one scale per row and 1 x 128 group
/// placed as `layout` says (ops/numerics.h fp8_act_scale / fp8_act_quant: the
/// CPU reference's bytes). Errors: k not a multiple of 128, rows not 8-byte
/// aligned, a layout whose groups do not cover the rows, a failed launch.
/// Capturable.
void quantize_rows_fp8(const uint16_t* x, int64_t ldx, int64_t rows, int64_t k, uint8_t* xq, float* xs,
                       cudaStream_t s, const Fp8ScaleLayout& layout = {});

/// Enqueues on `s`: scales xs_rows f32 [rows, kb] row-major with row stride
/// lds (Fp8Rows::scale, a producer's layout) -> dst placed as `layout` says
/// (quantize_rows_fp8's placement). Errors: a layout whose groups do not cover
/// the rows, a failed launch. Capturable.
void regroup_fp8_scales(const float* xs_rows, int64_t lds, int64_t rows, int64_t kb, float* dst,
                        const Fp8ScaleLayout& layout, cudaStream_t s);

/// Enqueues on `s`: y bf16 [R, C] (row stride a multiple of 4, 8-byte aligned)
/// -> its Fp8Rows y8 by quantize_rows_fp8: the second pass of a producer op
/// whose one-pass kernel does not apply. Error naming `what` when y8 is not
/// contiguous (this pass writes compact rows) or y does not fit the quantiser.
void quantize_fp8_rows_of(const Tensor& y, const Fp8Rows& y8, cudaStream_t s, const char* what);

}  // namespace magi2::cuda
