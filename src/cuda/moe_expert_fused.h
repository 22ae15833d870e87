// The routed experts in one kernel (spec magi2-dit.md §8.3-8.4): for each tile
// of <= 128 routed rows of one flat expert, the rows are gathered from the
// token rows into shared memory, G = x W_gate[f] and U = x W_up[f] run on
// Hopper tensor cores (wgmma), Z = bf16(swiglu7(bf16(G), bf16(U))) stays in
// registers as the A operand of Y = Z W_down[f], and bf16(Y x weight) is
// written: the gathered rows, the [R, 2 DE] gate/up buffer and the Z buffer
// never reach HBM. Host-only header; the kernel is moe_expert_fused.cu (CuTe,
// TMA, warp-specialised).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace magi2::cuda {

/// One call of the fused routed experts. Routed row p (expert order: rows
/// offsets[f] .. offsets[f + 1] - 1 belong to flat expert f) is token row
/// src[p] / mh, head src[p] % mh of `r`: r + (src[p] / mh) * ldr + (src[p] % mh) * dh,
/// dh bf16 values. Banks w_gate, w_up: [nf, dh, de] bf16 and w_down [nf, de, dh]
/// bf16, row-major ([k, n] per expert, as the checkpoint stores them). wrow[p]:
/// row p's routing weight (fp32). Output y [rows, dh] bf16 (row stride dh):
/// y[p] = bf16(fp32(Z W_down) x wrow[p]), the terms the weighted combine sums.
/// tile_start: device scratch of nf + 1 int32. All pointers 16-byte aligned.
struct ExpertFusedArgs {
  const uint16_t* r = nullptr;
  int64_t ldr = 0;
  int mh = 0;
  int64_t dh = 0, de = 0;
  const int32_t* src = nullptr;
  const int32_t* offsets = nullptr;  ///< [nf + 1] on the device
  int nf = 0;
  int64_t max_rows = 0;  ///< upper bound of offsets[nf] (sizes the grid; no host sync)
  const uint16_t* w_gate = nullptr;
  const uint16_t* w_up = nullptr;
  const uint16_t* w_down = nullptr;
  const float* wrow = nullptr;
  uint16_t* y = nullptr;
  int32_t* tile_start = nullptr;
};

/// Whether the fused kernel takes these widths: d_head 256 (one shared-memory
/// tile of K for W13, the N of W2), d_expert a multiple of 64, built with CUTLASS/CuTe.
bool moe_expert_fused_supported(int64_t dh, int64_t de);

/// Enqueues the fused routed experts on `s`: the tile scan over the expert
/// offsets, then one CTA per tile (the grid sized from max_rows; tiles past the
/// routed rows exit at once). Capturable: no host sync, no allocation (the TMA
/// descriptors are kernel parameters). Rounding as the grouped path with both
/// epilogues: G and U rounded to bf16, SwiGLU7 in fp32 (SFU sigmoid), Z rounded
/// to bf16, Y summed in fp32 over d_expert in ascending 16-blocks, times the
/// weight, rounded to bf16. Errors: unsupported widths, misaligned pointers or
/// strides, a TMA descriptor the driver refuses, a failed launch.
void moe_expert_fused(const ExpertFusedArgs& a, cudaStream_t s);

}  // namespace magi2::cuda
