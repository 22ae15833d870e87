// The kernels of attn_qkv and attn_out (attn_glue.cu), for the parity tests and
// bench_attention: the kernels of one op give the same bytes.
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

/// Which form of AttnQkvParams::fp8 runs (attn_glue.cu).
enum class AttnQkvFp8Kernel {
  kTiles,        ///< one kernel, a CTA per (head, key tile): q, k and v go out as e4m3 only (attn_qkv_fp8_tiles,
                 ///< the default)
  kQInProducer,  ///< the register kernel writes q as e4m3 + row scales (and k, v bf16); the quantiser takes
                 ///< k and v only
  kTwoPass,      ///< attn_qkv's bf16 q, k, v, then attention_fp8_quantize of all three (the path before)
};

/// AttnQkvParams::fp8 with a chosen form (same checks and bytes as attn_qkv with fp8): FP8 attention's
/// operands in the scratch of attention_fp8_operands(T, H, nseq, s). Needs head dim 128, a rotary half
/// that is a multiple of 8, 16-byte aligned rows and p.cu_seqlens (Error naming what is missing).
void attn_qkv_fp8_variant(const AttnQkvParams& p, cudaStream_t s, AttnQkvFp8Kernel kernel);

/// Which attn_out kernel runs.
enum class AttnOutKernel {
  kAuto,      ///< kRows where it applies, else kHalfWarp (what attn_out runs)
  kHalfWarp,  ///< one half-warp per (row, head); any head count; the oracle of kRows
  kRows,      ///< one warp per output row, all heads (<= 32 heads, 16-byte aligned rows, head dim % 8 == 0):
              ///< the sink factor and gate computed once per head and shuffled, 16-byte steps in flight
};

/// AttnOutParams with a chosen kernel (same checks and bytes as attn_out).
void attn_out_variant(const AttnOutParams& p, cudaStream_t s, AttnOutKernel kernel);

}  // namespace magi2::cuda
