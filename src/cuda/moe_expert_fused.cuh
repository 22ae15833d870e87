// Device pieces shared by the fused routed-expert kernels (moe_expert_fused.cu:
// bf16; moe_expert_fused_fp8.cu: W8A8). Tiles: a tile is <= kExpertTileRows
// routed rows of one flat expert, tiles numbered in expert order; one kernel
// scans the expert offsets into tile starts and each CTA finds its tile by a
// binary search. Rings: the weight chunks stream from one producer thread's
// TMA loads to the consumer warps through shared-memory stages. Device code.
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>

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

/// One ring of kStages shared-memory stages, chunk j in stage j % kStages:
/// `full` (the producer's TMA bytes landed) and `empty` (every consumer warp
/// is done with the stage) per stage, each phase the parity of j / kStages.
template <int kStages>
struct ExpertRing {
  uint64_t full[kStages], empty[kStages];
  /// One thread, before the CTA's first block barrier.
  __device__ void init(int consumer_warps) {
    for (int i = 0; i < kStages; ++i) {
      cutlass::arch::ClusterTransactionBarrier::init(&full[i], 1);
      cutlass::arch::ClusterBarrier::init(&empty[i], consumer_warps);
    }
  }
  /// Producer: waits until chunk j's stage is free, arms it for `bytes` and
  /// returns the barrier its TMA loads complete on.
  __device__ uint64_t* acquire(int j, uint32_t bytes) {
    const int s = j % kStages;
    cutlass::arch::ClusterBarrier::wait(&empty[s], ((j / kStages) & 1) ^ 1);
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&full[s], bytes);
    return &full[s];
  }
  /// Consumer: waits for chunk j's bytes.
  __device__ void wait(int j) { cutlass::arch::ClusterBarrier::wait(&full[j % kStages], (j / kStages) & 1); }
  /// Consumer warp (`signal` on one lane): done with chunk j's stage.
  __device__ void release(int j, bool signal) {
    if (signal) cutlass::arch::ClusterBarrier::arrive(&empty[j % kStages]);
  }
};

/// A consumer warpgroup whose rows all lie past the expert's end computes
/// nothing: it only keeps the empty barriers' counts, after each stage has
/// landed (so never a phase ahead).
template <int kStages13, int kStages2>
__device__ void expert_rings_idle(ExpertRing<kStages13>& r13, ExpertRing<kStages2>& r2, int chunks, bool signal) {
  for (int j = 0; j < chunks; ++j) {
    r13.wait(j);
    r13.release(j, signal);
    r2.wait(j);
    r2.release(j, signal);
  }
}

}  // namespace magi2::cuda
