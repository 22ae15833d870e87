// The 128-token tiles of the flash attention kernels (attention_flash.cu) and
// of the FP8 operands' quantiser (attention_fp8.cu): counted from each
// sample's first token, numbered sample after sample. Device code.
#pragma once

#include <cstdint>

#include "ops/fp8_attention_layout.h"  // attn_tiles_bound
#include "cuda/fp8_fragment.cuh"  // fp8_vt_key
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

/// Writes one key tile of V^T from its e4m3 rows in shared memory: vs holds
/// key r's 128 dims at vs + r * stride (keys past the sample's end as zeros),
/// vt points at column 128 tile of head row 0 ([H, 128, vt_cols] layout of
/// FlashFp8Operands::vt). Row d of the tile holds the keys in fp8_vt_key
/// order; warp w of `warps` writes rows w, w + warps, ..., lane its keys
/// 4 lane .. 4 lane + 3. The caller synchronises vs before.
__device__ __forceinline__ void store_vt_tile(const uint8_t* vs, int stride, uint8_t* vt, int64_t vt_cols,
                                              int warp, int warps, int lane) {
  for (int d = warp; d < 128; d += warps) {
    uint32_t w = 0;
    for (int u = 0; u < 4; ++u) w |= static_cast<uint32_t>(vs[fp8_vt_key(4 * lane + u) * stride + d]) << (8 * u);
    reinterpret_cast<uint32_t*>(vt + d * vt_cols)[lane] = w;
  }
}

}  // namespace magi2::cuda
