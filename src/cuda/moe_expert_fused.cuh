// Device pieces shared by the fused routed-expert kernels (moe_expert_fused.cu:
// bf16; moe_expert_fused_fp8.cu: W8A8). Tiles: a tile is <= kExpertTileRows
// routed rows of one flat expert, tiles numbered in expert order; one kernel
// scans the expert offsets into tile starts and each CTA finds its tile by a
// binary search. Rings (stage_ring.cuh): the weight chunks stream from one
// producer thread's TMA loads to the consumer warps through shared-memory
// stages. Device code.
#pragma once

#include <cstdint>

#include "cuda/block_scan.cuh"
#include "cuda/stage_ring.cuh"

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

/// A consumer warpgroup whose rows all lie past the expert's end computes
/// nothing: it only keeps the empty barriers' counts, after each stage has
/// landed (so never a phase ahead).
template <int kStages13, int kStages2>
__device__ void expert_rings_idle(StageRing<kStages13>& r13, StageRing<kStages2>& r2, int chunks, bool signal) {
  for (int j = 0; j < chunks; ++j) {
    r13.wait(j);
    r13.release(j, signal);
    r2.wait(j);
    r2.release(j, signal);
  }
}

}  // namespace magi2::cuda
