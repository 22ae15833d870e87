// W13 + SwiGLU7 of the routed experts in one kernel (spec magi2-dit.md §8.3):
// the routed rows are gathered from the token rows straight into shared
// memory, G = x W_gate[f] and U = x W_up[f] run on Hopper tensor cores (wgmma,
// sm90a), and Z = bf16(swiglu7(bf16(G), bf16(U))) is written: the [R, 2 DE]
// gate/up buffer, its separate SwiGLU7 pass and the gathered copy of the rows
// never reach HBM. Host-only header; the kernel is moe_w13_swiglu7.cu (CuTe).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace magi2::cuda {

/// One call of the fused W13 + SwiGLU7. Routed row p (expert order, rows
/// offsets[f] .. offsets[f + 1] - 1 belong to flat expert f) is token row
/// src[p] / mh, head src[p] % mh of `r`: r + (src[p] / mh) * ldr + (src[p] % mh) * dh,
/// dh bf16 values. Banks w_gate, w_up: [nf, dh, de] bf16, row-major ([k, n]
/// per expert, as the checkpoint stores them). Output z [rows, de] bf16, row
/// stride ldz elements. tile_start: device scratch of nf + 1 int32.
struct W13Swiglu7Args {
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
  uint16_t* z = nullptr;
  int64_t ldz = 0;
  int32_t* tile_start = nullptr;
};

/// Whether the fused kernel handles these widths: d_head 256 (the K of one
/// shared-memory tile), d_expert a multiple of 64, built with CUTLASS/CuTe.
bool moe_w13_swiglu7_supported(int64_t dh, int64_t de);

/// Enqueues the fused W13 + SwiGLU7 on `s` (two kernels: the tile scan over
/// the expert offsets, then the persistent-free tile grid sized from
/// max_rows; tiles past the routed rows exit at once). Capturable: no host
/// sync, no allocation. Rounding as the grouped path and the CPU reference:
/// G and U rounded to bf16, SwiGLU7 in fp32 (SFU sigmoid), Z rounded to bf16.
/// Errors: unsupported widths, misaligned pointers or strides (16 bytes), a
/// failed launch.
void moe_w13_swiglu7(const W13Swiglu7Args& a, cudaStream_t s);

}  // namespace magi2::cuda
