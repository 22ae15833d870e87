// TMA (Hopper tensor memory accelerator) descriptors for the warp-specialised
// kernels (moe_expert_fused.cu, attention_flash.cu). Host code.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace magi2::cuda {

/// Element types of tma_map_2d.
enum class TmaElem { kBf16, kU8 };

/// The descriptor of a row-major matrix [rows, cols] of bf16 or 1-byte
/// (e4m3) elements with a row stride of `ld` elements (>= cols, a multiple of
/// 16 bytes; base 16-byte aligned), read in boxes of [box_rows, box_cols] with
/// `swizzle` (the shared-memory atom of the consumer's layout; a box row must
/// not exceed the swizzle width). Reads past the last row or column fill zeros
/// and still count toward the barrier's bytes. Throws Error naming `what` if
/// the driver has no encoder or refuses the descriptor. Encoding is host-only
/// work (no stream, no sync), so it is legal during stream capture.
CUtensorMap tma_map_2d(const void* base, TmaElem elem, int64_t rows, int64_t cols, int64_t ld, int box_cols,
                       int box_rows, CUtensorMapSwizzle swizzle, const char* what);

}  // namespace magi2::cuda
