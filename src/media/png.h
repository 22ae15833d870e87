// PNG frames (libpng): `--save-frames DIR` writes one 8-bit RGB PNG per frame.
// Not an official output (the official code writes only the MP4); it is the
// lossless fallback where the build has no FFmpeg.
#pragma once

#include <string>

#include "core/tensor.h"

namespace magi2 {

/// Encodes one frame, U8 [H, W, 3] RGB (contiguous CPU), as PNG bytes (8-bit RGB,
/// no interlace, zlib level 6, libpng's default filters). Error on a bad tensor.
std::string encode_png_rgb(const Tensor& frame);

/// Writes each frame of `frames` (U8 [T, H, W, 3]) to DIR/frame_00000.png,
/// DIR/frame_00001.png, ... (5-digit zero-padded index, from 0). Creates DIR if
/// missing; every file is written atomically (temporary file, then rename).
/// Frames are encoded in parallel (OpenMP); the bytes do not depend on it.
/// Error naming the directory or file when it cannot be written.
void save_frames_png(const std::string& dir, const Tensor& frames);

/// File name of frame `index` inside a --save-frames directory ("frame_00042.png").
std::string frame_png_name(int64_t index);

/// Reads a PNG file as U8 [H, W, 3] RGB: palette and grey are expanded, 16-bit is
/// reduced to 8 (libpng's scaling), alpha is dropped. Error naming the path when the
/// file is missing, truncated or not a PNG.
Tensor read_png_rgb(const std::string& path);

}  // namespace magi2
