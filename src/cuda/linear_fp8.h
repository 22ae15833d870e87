// The FP8 linears' activation quantiser (linear_fp8.cu). Internal to src/cuda/.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace magi2::cuda {

/// Enqueues on `s`: x bf16 [rows, k] (row stride ldx elements) -> xq e4m3
/// [rows, k] (contiguous) and xs f32 [rows, k / 128], one scale per row and
/// 1 x 128 group (ops/numerics.h fp8_act_scale / fp8_act_quant: the CPU
/// reference's bytes). Errors: k not a multiple of 128, rows not 8-byte
/// aligned, a failed launch. Capturable.
void quantize_rows_fp8(const uint16_t* x, int64_t ldx, int64_t rows, int64_t k, uint8_t* xq, float* xs,
                       cudaStream_t s);

}  // namespace magi2::cuda
