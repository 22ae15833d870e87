// The 128-token tiles of the flash attention kernels (attention_flash.cu) and
// of the FP8 operands' quantiser (attention_fp8.cu): counted from each
// sample's first token, numbered sample after sample. Device code.
#pragma once

#include <cstdint>

#include "ops/fp8_attention_layout.h"  // attn_tiles_bound
#include "ops/numerics.h"

namespace magi2::cuda {

/// Tokens a tile (query rows of one CTA; in FP8 also a key tile's scale group).
constexpr int kAttnTile = kFp8AttnTile;

/// Tile `tile`: its first token q0 (absolute), its sample's [begin, end) and
/// the number of the sample's first tile (`first`).
struct AttnTile {
  int64_t q0, begin, end;
  int first;
};

/// Tile `tile` of the grid's x over cu_seqlens `cu` [nseq + 1]; false past the
/// last sample's tiles (a grid sized by attn_tiles_bound has such CTAs).
__device__ __forceinline__ bool attn_tile(int tile, const int32_t* __restrict__ cu, int nseq, AttnTile& t) {
  int first = 0;
  for (int b = 0; b < nseq; ++b) {
    const int64_t begin = cu[b], end = cu[b + 1];
    const int tiles = static_cast<int>((end - begin + kAttnTile - 1) / kAttnTile);
    if (tile - first < tiles) {
      t = {begin + static_cast<int64_t>(tile - first) * kAttnTile, begin, end, first};
      return true;
    }
    first += tiles;
  }
  return false;
}

/// The key (0..127) that column L of an FP8 V^T tile row holds: the order of
/// P's e4m3 registers in attention_flash's FP8 kernel, where the A fragment's
/// keys 4t + u of each 16 (t = 0..3, u = 0..3) are the accumulator's keys
/// 2t + (u & 1) + 8 (u >> 1) (checked at compile time in attention_flash.cu).
__host__ __device__ constexpr int fp8_vt_key(int L) {
  const int w = L & 15, t = w >> 2, u = w & 3;
  return (L & ~15) | (2 * t + (u & 1) + 8 * (u >> 1));
}

}  // namespace magi2::cuda
