// TMA (Hopper tensor memory accelerator) descriptors for the warp-specialised
// kernels (moe_expert_fused.cu, attention_flash.cu). Host code.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace magi2::cuda {

/// The descriptor of a row-major bf16 matrix [rows, cols] with a row stride of
/// `ld` elements (>= cols, ld * 2 a multiple of 16 bytes, base 16-byte
/// aligned), read in boxes of [box_rows, box_cols] with `swizzle` (the
/// shared-memory atom of the consumer's layout; box_cols * 2 bytes must not
/// exceed the swizzle width). Reads past the last row or column fill zeros and
/// still count toward the barrier's bytes. Throws Error naming `what` if the
/// driver has no encoder or refuses the descriptor. Encoding is host-only work
/// (no stream, no sync), so it is legal during stream capture.
CUtensorMap tma_map_bf16(const void* base, int64_t rows, int64_t cols, int64_t ld, int box_cols, int box_rows,
                         CUtensorMapSwizzle swizzle, const char* what);

}  // namespace magi2::cuda
