// SHA-256 digests of generated outputs (spec magi2-pipeline.md §7.3). The official
// code computes none; MP4 bytes depend on the encoder build, so the gate hashes
// the raw arrays: the uint8 video [T,H,W,3] and the f32 audio [N,2], C order,
// bytes as in memory (little-endian on every supported host). OpenSSL EVP.
#pragma once

#include <cstddef>
#include <string>

#include "core/tensor.h"
#include "media/clip.h"

namespace magi2 {

/// Lower-case hex SHA-256 (64 characters) of `size` bytes at `data`.
std::string sha256_hex(const void* data, size_t size);
/// Lower-case hex SHA-256 of the file's bytes; Error naming the path when it cannot be read.
std::string sha256_file_hex(const std::string& path);
/// Lower-case hex SHA-256 of a contiguous CPU tensor's bytes in row-major (C) order.
std::string tensor_sha256_hex(const Tensor& t);

/// Digests of one clip's raw arrays.
struct ClipHashes {
  std::string video;  ///< SHA-256 of `frames` (U8 [T,H,W,3]) bytes
  std::string audio;  ///< SHA-256 of `audio` (F32 [N,2]) bytes; empty when the clip has no audio
};
/// Hashes a clip (checks shapes/dtypes as check_frames / check_audio do).
ClipHashes clip_sha256(const Clip& clip);

}  // namespace magi2
