// The producer kernels of attn_qkv (attn_glue.cu), for the parity test and
// bench_attention: every kernel gives the same bytes.
#pragma once

#include <cuda_runtime.h>

#include "ops/ops.h"

namespace magi2::cuda {

/// Which attn_qkv kernel runs.
enum class AttnQkvKernel {
  kAuto,       ///< kRegisters where it applies, else kHalfWarp (what attn_qkv runs)
  kHalfWarp,   ///< one half-warp per (token, head, q|k|v), the vector in shared memory: any head dim <= 256,
               ///< any alignment (1.24 ms at 272p on the H200); the oracle of kRegisters
  kRegisters,  ///< one half-warp per (token, head) for q, k and v, elements in registers, 16-byte loads of
               ///< the gains and the table, rope's partner by shuffle; needs 16-byte aligned rows, head dim 128
               ///< and a rotary half that is a multiple of 8 (else it falls back to kHalfWarp)
};

/// AttnQkvParams with a chosen kernel (same checks and bytes as attn_qkv).
void attn_qkv_variant(const AttnQkvParams& p, cudaStream_t s, AttnQkvKernel kernel);

}  // namespace magi2::cuda
