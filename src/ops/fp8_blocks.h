// FP8 block quantisation of weight banks (DeepSeek-V3 style, the common
// `weight_scale_inv` convention): e4m3fn values with one fp32 scale per
// 128 x 128 tile of the last two dimensions, w ~= fp8 * scale_inv. Used for
// MAGI-2's routed expert banks (docs/fp8.md); host code, OpenMP-parallel.
#pragma once

#include <string>

#include "core/tensor.h"

namespace magi2 {

/// A block-quantised tensor: q has the source's shape (F8E4M3), scale_inv is
/// [..., ceil(A / 128), ceil(B / 128)] f32 for a source [..., A, B].
struct Fp8Blocks {
  Tensor q;
  Tensor scale_inv;
};

/// The scale tensor's shape for a weight of `shape` (at least 2-D).
Shape fp8_scale_shape(const Shape& shape);

/// The checkpoint name of a weight's scales: `name` + "_scale_inv".
std::string fp8_scale_name(const std::string& name);

/// Quantises a contiguous CPU float tensor (bf16, f16 or f32; >= 2-D): per
/// 128 x 128 block, amax = max |w|, scale_inv = amax / 448 (1 for an all-zero
/// block), q = e4m3(w / scale_inv) rounded to nearest even (f32 division, as
/// DeepSeek-V3's reference cast). Error naming `what` for a non-finite value
/// (which would poison its whole block).
Fp8Blocks quantize_fp8_blocks(const Tensor& w, const std::string& what);

/// The bf16 weights the FP8 expert path multiplies by: bf16(q * scale_inv) per
/// element (ops/numerics.h fp8_dequant_f32, then RNE to bf16), contiguous CPU.
/// Error naming `what` when q is not F8E4M3 or scale_inv has the wrong shape.
Tensor dequantize_fp8_blocks(const Tensor& q, const Tensor& scale_inv, const std::string& what);

/// Checks that (q, scale_inv) are a block-quantised pair: q F8E4M3 (>= 2-D),
/// scale_inv f32 of fp8_scale_shape(q). Error naming `what`.
void check_fp8_pair(const Tensor& q, const Tensor& scale_inv, const std::string& what);

}  // namespace magi2
