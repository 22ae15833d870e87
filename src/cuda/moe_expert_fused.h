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

/// One call of the W8A8 fused routed experts (moe_expert_fused_fp8.cu,
/// docs/fp8.md). Routed row p (expert order, offsets as above) is xq[p] [dh]
/// e4m3 with scales xs[p] [dh / 128] f32 (one per 1 x 128 group: the
/// quantising scatter of moe_w8a8.cu). Banks, all e4m3 and K-major: gate_t,
/// up_t [nf, de, dh] (W_gate, W_up transposed), down_t [nf, dh, de] (W_down
/// transposed, each 32 columns of de in fp8_vt_key order); their scales as
/// the checkpoint stores them for the untransposed banks: gate_scale,
/// up_scale [nf, dh / 128, de / 128], down_scale [nf, de / 128, dh / 128].
/// y [rows, dh] bf16: y[p] = bf16((Y x fp8_z_unscale) x wrow[p]) with the
/// rounding points of cpu/moe_w8a8.cpp. tile_start: nf + 1 int32 of scratch.
struct ExpertFusedFp8Args {
  const uint8_t* xq = nullptr;
  const float* xs = nullptr;
  int64_t dh = 0, de = 0;
  const int32_t* offsets = nullptr;  ///< [nf + 1] on the device
  int nf = 0;
  int64_t max_rows = 0;  ///< upper bound of offsets[nf] (sizes the grid; no host sync)
  const uint8_t* gate_t = nullptr;
  const uint8_t* up_t = nullptr;
  const uint8_t* down_t = nullptr;
  const float* gate_scale = nullptr;
  const float* up_scale = nullptr;
  const float* down_scale = nullptr;
  const float* wrow = nullptr;
  uint16_t* y = nullptr;
  int32_t* tile_start = nullptr;
};

/// Whether the W8A8 fused kernel takes these widths: d_head 256 and d_expert a
/// multiple of 128 up to 8192, built with CUTLASS/CuTe.
bool moe_expert_fused_fp8_supported(int64_t dh, int64_t de);

/// Enqueues the W8A8 fused routed experts on `s` (the tile scan, then one CTA
/// per tile). Capturable: no host sync, no allocation. Errors: unsupported
/// widths, misaligned pointers, a TMA descriptor the driver refuses, a failed launch.
void moe_expert_fused_fp8(const ExpertFusedFp8Args& a, cudaStream_t s);

}  // namespace magi2::cuda
