// Entry points of the CUDA backend's attention-path ops (row gathers, RoPE,
// attention with sinks). Host-side declarations; kernels in rows.cu, rope.cu
// and attention.cu. Each enqueues on `s` and returns without a host wait.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "ops/ops.h"

namespace magi2::cuda {

/// GatherRowsParams on device tensors (index on the device; a row whose index is
/// outside the source is written as zeros, no host check).
void gather_rows(const GatherRowsParams& p, cudaStream_t s);  // rows.cu
/// CopyColsParams on device tensors (one 2-D async copy).
void copy_cols(const CopyColsParams& p, cudaStream_t s);  // rows.cu
/// RopeTableParams: sin/cos evaluated in double and rounded to fp32 (the
/// correctly rounded value; the CPU's glibc sinf/cosf may be 1 ulp off it).
/// The CPU's non-finite-scale error is not raised here (it would need a host
/// wait): such a row gets scale 0, as the CPU computes before throwing.
void rope_table(const RopeTableParams& p, cudaStream_t s);  // rope.cu
/// RopeParams (src_rows on the device; an out-of-range source row reads its own
/// row, no host check), bit-identical to the CPU on valid input.
void rope(const RopeParams& p, cudaStream_t s);  // rope.cu
/// The checked shape of an attention call (attention.cu).
struct AttentionShape {
  int64_t t = 0, h = 0, hd = 0, nseq = 0, max_len = 0;
  const int32_t* cu = nullptr;  ///< cu_seqlens on the device
};
/// Checks AttentionParams for the CUDA backend (devices, dtypes, shapes, 16-byte
/// alignment, lse or sinks); throws Error naming the bad tensor.
AttentionShape check_attention(const AttentionParams& p);
/// Which kernel serves AttentionParams (CudaOptions::attention).
enum class AttentionKernel {
  kAuto,   ///< attention_flash where it applies (lse given, head dim 128), else as kCudnn
  kCudnn,  ///< cuDNN SDPA where it applies, else attention_fp32
  kFp32,   ///< always attention_fp32 (the parity oracle)
};
/// AttentionParams on the tensor cores: the own flash kernel
/// (attention_flash.h) or cuDNN SDPA (attention_cudnn.cpp), else
/// attention_fp32, as `kernel` says; p.fp8 runs the flash kernel in FP8
/// whatever `kernel` (Error without the lse or at a head dim other than 128).
/// Builds a cuDNN plan on the first cuDNN call of a request shape; throws if
/// that first call happens during stream capture.
void attention(const AttentionParams& p, cudaStream_t s, AttentionKernel kernel = AttentionKernel::kAuto);
/// Diagnostics (bench_attention --cudnn-plans): builds p's SDPA graph (with lse)
/// with every plan cuDNN's heuristics A, B and fallback offer, runs each `reps`
/// times on p's buffers (overwriting o and lse) and returns (plan name, median
/// ms) per plan that ran. Synchronises; outside capture. Empty without cuDNN or lse.
std::vector<std::pair<std::string, double>> cudnn_sdpa_plan_times(const AttentionParams& p, cudaStream_t s,
                                                                  int reps);
/// AttentionParams (deferred sink too): the fp32 CUDA-core flash kernel
/// (attention.cu), head dims 64 and 128; the fallback and test oracle.
void attention_fp32(const AttentionParams& p, cudaStream_t s);
/// BlockSparseAttentionParams on device q/k/v/o (host pair lists): bf16
/// tensor-core flash kernel over each q range's merged k ranges, head dims 32,
/// 64 and 128 (block_sparse_attention.cu). The pair list is planned and
/// uploaded on its first call, which must be outside stream capture.
void block_sparse_attention(const BlockSparseAttentionParams& p, cudaStream_t s);
/// AttnQkvParams: one kernel, bit-identical to rms_norm + rope + gather_rows (attn_glue.cu). With p.fp8:
/// FP8 attention's operands (attn_qkv_fp8_variant, attn_glue_variants.h), p.q, p.k and p.v not written.
void attn_qkv(const AttnQkvParams& p, cudaStream_t s);
/// The checked shape of an attn_qkv call: tokens, heads, head dim, rotary half (attn_glue.cu).
struct AttnQkvShape {
  int64_t t = 0, h = 0, hd = 0, half = 0;
};
/// Checks AttnQkvParams for the CUDA backend (devices, dtypes, shapes; p.q, p.k,
/// p.v give T, H, hd even where p.fp8 leaves them unwritten); throws Error
/// naming the bad tensor.
AttnQkvShape check_attn_qkv(const AttnQkvParams& p);
/// AttnOutParams: one kernel for sink factor + gather + gate (attn_glue.cu).
void attn_out(const AttnOutParams& p, cudaStream_t s);
/// In place o[t, h, :] = bf16(o * exp(lse - logaddexp(lse, sinks[h]))): o [T, H, hd]
/// bf16 contiguous, lse [T, H] f32 and sinks [H] f32 device pointers (attn_glue.cu).
void sink_correct(const Tensor& o, const float* lse, const float* sinks, cudaStream_t s);
/// cuDNN's ragged metadata from cu_seqlens [nseq+1] (device): seq[b] = cu[b+1] - cu[b]
/// (i32 [nseq]), off_x[b] = cu[b] * token_elems and off_s[b] = cu[b] * stats_elems
/// (i64 [nseq+1] element offsets). Device only, no host read (attn_glue.cu).
void ragged_meta(const int32_t* cu, int64_t nseq, int64_t token_elems, int64_t stats_elems, int32_t* seq,
                 int64_t* off_x, int64_t* off_s, cudaStream_t s);

}  // namespace magi2::cuda
