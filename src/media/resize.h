// Output resize (`--output-width/--output-height`), as the official pipeline.py
// _resize_video does it: frames u8 -> f32 (/255), torch bilinear interpolation
// with align_corners=False (no antialias) per frame and channel, clamp to [0, 1],
// x255, then back to u8. Implemented here, not with swscale, so the numbers follow
// the official formula and the feature needs no FFmpeg.
#pragma once

#include "core/tensor.h"

namespace magi2 {

/// How the resized f32 values in [0, 255] become u8.
enum class ResizeRounding {
  Truncate,  ///< `.byte()`: official MAGI-2 pipeline.py (default)
  Nearest,   ///< round half to even: vLLM-Omni's resize (spec magi2-pipeline.md §7.1)
};

/// Resizes U8 [T, H, W, 3] frames (contiguous CPU) to [T, out_height, out_width, 3].
/// Per output pixel (torch upsample_bilinear2d, align_corners=False): source
/// coordinate s = max(fma(in/out, d + 0.5, -0.5), 0), i0 = floor(s), i1 = min(i0 + 1,
/// in - 1), weights 1 - (s - i0) and s - i0, all in f32; each row pair blended as
/// fma(x0, w0, x1 * w1), then the rows the same way. This is bit-exact with torch's
/// generic CPU kernel (FMA build), which torch uses whenever out_height + out_width
/// > 128 (every real output size); for smaller outputs torch switches to a kernel
/// with another summation order whose result also depends on the CPU's vector width,
/// and the two can differ by one u8 level at exact ties.
/// Returns the input unchanged when the size already matches. Deterministic and
/// parallel over frames. Error on bad input or a size < 1.
Tensor resize_frames_bilinear(const Tensor& frames, int64_t out_width, int64_t out_height,
                              ResizeRounding rounding = ResizeRounding::Truncate);

}  // namespace magi2
