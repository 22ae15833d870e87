// The tiles of the fused routed-expert kernels (moe_expert_fused.cu: bf16;
// moe_expert_fused_fp8.cu: W8A8): a tile is <= kExpertTileRows routed rows of
// one flat expert, tiles numbered in expert order. One kernel scans the
// expert offsets into tile starts; each CTA finds its tile by a binary search.
// Device code.
#pragma once

#include <cstdint>

#include "cuda/block_scan.cuh"

namespace magi2::cuda {

/// Routed rows a tile (64 per consumer warpgroup).
constexpr int kExpertTileRows = 128;
/// Threads of expert_tile_scan's one block.
constexpr int kExpertScanThreads = 1024;

/// tile_start[f] = tiles of the experts before f; tile_start[nf] = all tiles.
/// One block of kExpertScanThreads threads.
__global__ void expert_tile_scan(const int32_t* __restrict__ offsets, int nf, int32_t* __restrict__ tile_start);

/// One tile: its flat expert f, its first routed row and its row count (<= kExpertTileRows).
struct ExpertTile {
  int f;
  int64_t row0;
  int rows;
};

/// Tile `tile` (< tile_start[nf]): its expert is the last f with tile_start[f]
/// <= tile (one with rows).
__device__ __forceinline__ ExpertTile expert_tile_of(int tile, const int32_t* __restrict__ tile_start,
                                                     const int32_t* __restrict__ offsets, int nf) {
  int lo = 0, hi = nf - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tile_start[mid] <= tile) lo = mid; else hi = mid - 1;
  }
  const int64_t row0 = offsets[lo] + static_cast<int64_t>(tile - tile_start[lo]) * kExpertTileRows;
  return {lo, row0, static_cast<int>(min(static_cast<int64_t>(kExpertTileRows), offsets[lo + 1] - row0))};
}

}  // namespace magi2::cuda
