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

/// The FP8 operands of one attention call (AttentionParams::fp8), on the
/// device; attention_fp8_quantize writes them, attention_flash_fp8 reads them.
/// Scales and tiles as kFp8AttnTile's comment (ops/numerics.h).
struct FlashFp8Operands {
  uint8_t* q = nullptr;   ///< e4m3 [T, H, 128]: q / sq
  uint8_t* k = nullptr;   ///< e4m3 [T, H, 128]: k / sk of the key's tile
  uint8_t* vt = nullptr;  ///< e4m3 [H, 128, vt_cols]: v / sv transposed, tile i in columns [128 i, 128 i + 128)
                          ///< with the keys of each 16 in the order P's registers hold them (attention_fp8.cu)
  float* sq = nullptr;    ///< [T, H] f32
  float* sk = nullptr;    ///< [tiles, H] f32 (tiles = attn_tiles_bound(T, nseq))
  float* sv = nullptr;    ///< [tiles, H] f32
  int64_t vt_cols = 0;    ///< 128 * tiles
};

/// Device bytes of FlashFp8Operands for T tokens, H heads and nseq samples.
int64_t attention_fp8_bytes(int64_t t, int64_t h, int64_t nseq);
/// FlashFp8Operands carved out of `base` (attention_fp8_bytes(t, h, nseq)
/// device bytes, 256-byte aligned).
FlashFp8Operands attention_fp8_layout(void* base, int64_t t, int64_t h, int64_t nseq);

/// Quantises p.q, p.k, p.v (bf16 [T, H, 128]) into `f` (attention_fp8.cu);
/// the scales and e4m3 values are those of the CPU reference
/// (cpu/attention_fp8.cpp) bit for bit. Enqueues on `s`, no host wait.
/// with_q = false: k and v only (f.q and f.sq were written by attn_qkv with
/// AttnQkvParams::fp8; p.q is not read).
void attention_fp8_quantize(const AttentionParams& p, const AttentionShape& a, const FlashFp8Operands& f,
                            cudaStream_t s, bool with_q = true);

/// AttnQkvParams::fp8's default form (attn_qkv_fp8.cu): FP8 attention's
/// operands in `f` straight from p.qkv, one kernel, every byte and scale those
/// of attn_qkv + attention_fp8_quantize; p.q, p.k and p.v are not written.
/// t, h, half: check_attn_qkv(p)'s tokens, heads and rotary half (head dim
/// 128, half a multiple of 8, 16-byte aligned rows: attn_qkv_fp8_variant
/// checks them); nseq samples in p.cu_seqlens. Enqueues on `s`, no host wait.
/// Throws Error past 65,535 key tiles or heads.
void attn_qkv_fp8_tiles(const AttnQkvParams& p, int64_t t, int64_t h, int64_t half, int64_t nseq,
                        const FlashFp8Operands& f, cudaStream_t s);

/// FP8 kernel variants, for measurements (bench_attention --fp8). kDefault:
/// the two consumer warpgroups issue their GEMMs independently (no
/// ping-pong), two-stage rings, every exponential of the softmax on the SFU
/// (ex2.approx): the measured fastest (docs/perf.md). kPingPong: with
/// FlashVariant::kDefault's turns; kThreeStages: three-stage rings; kEmu2: 2
/// of every 8 exponentials on the FMA pipe (exp2_fma_f32, ops/numerics.h).
enum class Fp8FlashVariant { kDefault, kPingPong, kThreeStages, kEmu2 };

/// attention_flash on the FP8 operands `f` of p (attention_fp8_quantize):
/// e4m3 wgmma for Q K^T and P V, P = e4m3(2^8 p), fp32 softmax and
/// accumulation, o bf16 and lse f32 as attention_flash. Same preconditions.
void attention_flash_fp8(const AttentionParams& p, const AttentionShape& a, const FlashFp8Operands& f,
                         cudaStream_t s, Fp8FlashVariant v = Fp8FlashVariant::kDefault);

/// The FP8 operands' scratch of (current device, s) for T tokens, H heads and
/// nseq samples: owned for the process, one per (device, stream), shared by
/// attention_fp8 and attn_qkv with AttnQkvParams::fp8. A shape larger than any before on `s`
/// grows it (after a wait for the stream, so outside stream capture only:
/// Error otherwise, as cuDNN's plans); shapes that fit allocate nothing.
FlashFp8Operands attention_fp8_operands(int64_t t, int64_t h, int64_t nseq, cudaStream_t s);

/// AttentionParams::fp8 on CUDA: attention_fp8_quantize into the scratch of
/// attention_fp8_operands (skipped with p.fp8_from_qkv: attn_qkv with
/// AttnQkvParams::fp8 filled it), then attention_flash_fp8.
void attention_fp8(const AttentionParams& p, const AttentionShape& a, cudaStream_t s);

}  // namespace magi2::cuda
