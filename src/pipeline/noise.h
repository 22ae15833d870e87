// Initial Gaussian noise of the sampler from a counter-based RNG, so that any
// element can be drawn independently: every rank of a split latent computes
// exactly its own slice, with no communication and no shared RNG state.
// Source: spec magi2-pipeline.md §5.6 (the official code draws
// torch.randn(f32) on the GPU, video first, then audio; that stream is NOT
// reproduced here, see below). Own implementation of Philox4x32-10
// (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
//
// Exact mapping (all integers unsigned, little end first):
//   key     = (k0, k1)         = (lo32(seed), hi32(seed))
//   counter = (c0, c1, c2, c3) = (lo32(b), hi32(b), lo32(stream), hi32(stream)),
//             with block b = i / 4 for element index i (row-major flat index)
//   (w0, w1, w2, w3) = Philox4x32-10(counter, key)
//   Box-Muller on the pairs (w0, w1) -> lanes 0, 1 and (w2, w3) -> lanes 2, 3:
//     u = (w_even + 1) * 2^-32   in (0, 1]      (never 0, so the log is finite)
//     v =  w_odd       * 2^-32   in [0, 1)
//     r = sqrt(-2 ln u), theta = 2 pi v       (in double)
//     lane even = f32(r cos theta), lane odd = f32(r sin theta)
//   element i = lane (i mod 4) of block i / 4.
// So element i depends only on (seed, stream, i); magnitudes are bounded by
// sqrt(64 ln 2) ~ 6.66. Values are f32 roundings of double results; a device
// port must evaluate the same double formulas to agree bit for bit.
//
// Difference from the official pipeline: PyTorch's CUDA randn depends on the
// GPU's SM count and launch geometry (spec §5.6), so its values cannot be
// drawn per element; golden comparisons feed the dumped noise tensors instead.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace magi2 {

/// Stream id of the initial video latent noise [1, 48, T, H, W].
constexpr uint64_t kNoiseStreamVideo = 0x766964656f;  // "video"
/// Stream id of the initial audio latent noise [1, L, 64].
constexpr uint64_t kNoiseStreamAudio = 0x617564696f;  // "audio"

/// Philox4x32 with 10 rounds: multipliers 0xD2511F53 / 0xCD9E8D57, Weyl key
/// increments 0x9E3779B9 / 0xBB67AE85 (the Random123 reference constants).
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                      std::array<uint32_t, 2> key);

/// Standard normal sample number `index` of (`seed`, `stream`), f32, per the
/// mapping in this header.
float philox_normal(uint64_t seed, uint64_t stream, uint64_t index);

/// out[k] = philox_normal(seed, stream, begin + k) for k < out.size(). Any
/// split of [0, n) into ranges gives the same values as one call over [0, n).
/// Error if begin + out.size() overflows uint64.
void fill_normal(uint64_t seed, uint64_t stream, uint64_t begin, std::span<float> out);

/// New contiguous CPU F32 tensor of `shape`, element with flat row-major index
/// i = philox_normal(seed, stream, i). Error on a negative dimension.
Tensor randn_philox(const Shape& shape, uint64_t seed, uint64_t stream);

}  // namespace magi2
