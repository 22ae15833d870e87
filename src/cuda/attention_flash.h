// The own flash attention forward for Hopper (attention_flash.cu): TMA +
// wgmma + warp specialisation, FlashAttention-3's plan, for the DiT's
// self-attention with the sink deferred to attn_out (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attn_ops.h"

namespace magi2::cuda {

/// Whether attention_flash takes this head dim (128 only, the DiT's).
bool attention_flash_supported(int64_t hd);

/// Kernel variants, for measurements (bench_attention --flash): kDefault,
/// the two consumer warpgroups taking turns issuing their GEMMs (ping-pong,
/// the measured faster) with two-stage key/value rings; kNoPingPong; and
/// kThreeStages (ping-pong, three-stage rings: 225 KB of shared memory).
enum class FlashVariant { kDefault, kNoPingPong, kThreeStages };

/// AttentionParams with the lse output (the sink deferred to attn_out): q, k,
/// v, o bf16 [T, H, 128] contiguous, lse f32 [T, H], cu_seqlens i32 [nseq+1]
/// on the device; each sample attends to its own tokens (non-causal). o =
/// bf16(softmax(scale q k^T) v) with fp32 scores, softmax and accumulation,
/// lse = the natural log-sum-exp of scale q k^T per (token, head), as cuDNN's
/// SDPA statistics. `a` is check_attention(p). Enqueues on `s` without a host
/// wait (capturable; no allocation). Not bit-identical to cuDNN (both are
/// within bf16 rounding of the fp32 reference). Throws Error for another head
/// dim or a missing lse.
void attention_flash(const AttentionParams& p, const AttentionShape& a, cudaStream_t s,
                     FlashVariant v = FlashVariant::kDefault);

}  // namespace magi2::cuda
