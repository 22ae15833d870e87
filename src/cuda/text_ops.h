// Entry points of the CUDA backend's Qwen3.5 text encoder ops (ops.h "Qwen3.5
// text encoder ops"). Host-side declarations; kernels in text_ops.cu,
// delta_rule.cu and causal_attention.cu. Each checks its operands
// (ops/text_checks.h: the CPU backend's errors), enqueues on `s` and returns
// without a host wait; none allocates, so the calls capture into a graph.
#pragma once

#include <cuda_runtime.h>

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
/// chunked UT form; fp32 rounding differs (docs/cuda.md has the bound).
void gated_delta_rule(const GatedDeltaRuleParams& p, cudaStream_t s);
/// CausalAttentionParams: our kernel with the CPU's algorithm step for step
/// (key blocks of 512, running max, p rounded to bf16 before P V, fp32 row
/// sum, the dot_f32 order): bit-identical to the CPU backend, one warp per
/// (query, head) on the CUDA cores (causal_attention.cu). Any head dim.
void causal_attention(const CausalAttentionParams& p, cudaStream_t s);

}  // namespace magi2::cuda
