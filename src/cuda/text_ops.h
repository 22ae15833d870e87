// Entry points of the CUDA backend's Qwen3.5 text encoder ops (ops.h "Qwen3.5
// text encoder ops"). Host-side declarations; kernels in text_ops.cu,
// delta_rule.cu and causal_attention.cu. Each checks its operands
// (ops/text_checks.h: the CPU backend's errors), enqueues on `s` and returns
// without a host wait; none allocates, so the calls capture into a graph.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/ops.h"

namespace magi2::cuda {

/// CausalConv1dParams: one thread per output element, the taps summed in the
/// CPU's order: bit-identical to the CPU backend (text_ops.cu).
void causal_conv1d(const CausalConv1dParams& p, cudaStream_t s);
/// GatedRmsNormParams: a 16-lane group per d-vector, the mean square in the
/// CPU's dot_f32 order: bit-identical (text_ops.cu).
void gated_rms_norm(const GatedRmsNormParams& p, cudaStream_t s);
/// RotaryParams in place. positions must be null (row index = position): host
/// position vectors would need an upload (Error otherwise). cos/sin are
/// evaluated in double and rounded to fp32 (glibc's cosf/sinf may be 1 ulp
/// off that), then rounded as the CPU; the rest is its fp32 arithmetic (text_ops.cu).
void rotary(const RotaryParams& p, cudaStream_t s);
/// SigmoidMulParams / SiluMulParams: bit-identical element-wise kernels (text_ops.cu).
void sigmoid_mul(const SigmoidMulParams& p, cudaStream_t s);
void silu_mul(const SiluMulParams& p, cudaStream_t s);
/// GatedDeltaRuleParams: the recurrent form of the gated delta rule, one block
/// per (value head, 32 value columns) walking the tokens in order with its
/// fp32 state slice in registers (delta_rule.cu). Algebraically the CPU's
/// chunked UT form; fp32 rounding differs (docs/cuda-stages.md has the bound).
void gated_delta_rule(const GatedDeltaRuleParams& p, cudaStream_t s);
/// CausalAttentionParams. bf16 with contiguous q, k, v, o and head dims that
/// are multiples of 8 up to 256: cuDNN SDPA (causal_attention_cudnn) unless
/// `own_kernel_only` (CudaOptions::attention "fp32") or cuDNN cannot build
/// the shape. Otherwise our kernel, the CPU's algorithm step for step (key
/// blocks of 512, running max, p rounded to bf16 before P V, fp32 row sum, the
/// dot_f32 order): bit-identical to the CPU backend, one warp per (query, head)
/// on the CUDA cores, head dims up to 512 (causal_attention.cu).
void causal_attention(const CausalAttentionParams& p, cudaStream_t s, bool own_kernel_only = false);
/// cuDNN 9 SDPA for one causal GQA sequence of t tokens (attention_cudnn.cpp):
/// ragged THD with the causal and padding masks, fp32 softmax, P rounded to
/// bf16 before P V (its rounding points, not the CPU kernel's: a tolerance).
/// One plan per (t rounded up to 256, H, Hkv, hd, scale), built on first use
/// (outside stream capture, else Error). False when this build has no cuDNN
/// or cuDNN cannot run the shape (reported once on stderr).
bool causal_attention_cudnn(const CausalAttentionParams& p, int64_t t, int64_t h, int64_t hkv, int64_t hd,
                            cudaStream_t s);
/// Writes cuDNN's ragged metadata of one sequence of t tokens from kernel
/// arguments (capturable): seq[0] = t, off_q = {0, t q_elems}, off_kv =
/// {0, t kv_elems} (causal_attention.cu).
void causal_meta(int64_t t, int64_t q_elems, int64_t kv_elems, int32_t* seq, int64_t* off_q, int64_t* off_kv,
                 cudaStream_t s);

}  // namespace magi2::cuda
