// PIL-exact image resampling for the I2V reference image (spec pipeline §1.3
// steps 3-4). The official preprocessing resizes twice with PIL's LANCZOS
// filter; matching its pixels bit for bit needs PIL's own algorithm
// (libImaging/Resample.c): a separable two-pass resample, horizontal first,
// with double-precision filter taps quantised to 22-bit fixed point and 8-bit
// intermediate and output pixels.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace magi2 {

/// PIL `Image.resize((out_w, out_h), Image.LANCZOS)` of an RGB image.
/// rgb: contiguous U8 [H, W, 3]; returns U8 [out_h, out_w, 3]. Like PIL, the
/// same size returns an unchanged copy, and a pass whose size does not change
/// is skipped (the other runs alone). Errors: Error for a bad tensor or a
/// target size < 1.
Tensor resize_lanczos_pil(const Tensor& rgb, int64_t out_w, int64_t out_h);

}  // namespace magi2
