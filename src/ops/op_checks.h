// Argument checks shared by every backend's ops: one wording of the shape and
// row-group errors, whatever the device. Light header (usable from .cu files).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/ops.h"

namespace magi2 {

/// Checks that `t` is a 2-D tensor [rows, cols] on `device` with unit column
/// stride (row-strided views allowed). Error names `what`.
void check_2d_on(Device device, const Tensor& t, int64_t rows, int64_t cols, const char* what);

/// Checks that `t` is a contiguous i32 tensor of `n` elements on `device` and
/// returns its data. Error names `what`.
const int32_t* check_index_on(Device device, const Tensor& t, int64_t n, const char* what);

/// Checks that the row groups cover `rows` rows in order (1 to 3 groups). Error names `what`.
void check_row_groups(const Groups& g, int64_t rows, const char* what);

/// Checks MhcPostResParams::next (ops.h) when next.logits is defined, for a
/// state of `rows` rows and virtual width `vw` on `device`: logits f32 [rows,
/// 24] with unit column stride, row groups covering `rows`, norm_w vw x groups
/// contiguous f32 values, phi contiguous f32 [vw, 24]. One Error naming the
/// operand (mhc_post_res.next.*) otherwise; nothing when next.logits is undefined.
void check_mhc_next(Device device, const MhcPostResParams& p, int64_t rows, int64_t vw);

/// Checks Fp8Rows for an activation [rows, cols] on `device`: q F8E4M3
/// [rows, cols] and scale F32 [rows, cols / 128], both with unit column stride
/// (row-strided ok), cols a multiple of 128. One Error naming `what` otherwise.
void check_fp8_rows(Device device, const Fp8Rows& a, int64_t rows, int64_t cols, const char* what);

/// Checks an FP8 linear (LinearParams with w_scale, docs/fp8.md) on `device`:
/// x [R, in] and y [R, out] bf16 (row-strided ok), W F8E4M3 [G*out, in]
/// contiguous, w_scale f32 [G, ceil(out / 128), ceil(in / 128)] contiguous, no
/// bias, groups covering R, x8 (if any) Fp8Rows of [R, in]. One Error naming
/// the operand otherwise.
void check_linear_fp8(Device device, const LinearParams& p);

}  // namespace magi2
