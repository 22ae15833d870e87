// Argument checks of the Qwen3.5 text encoder ops (ops/text_params.h), one per op, shared
// by the CPU and CUDA backends: the same errors whatever the device. Each
// returns the sizes the op derives from its operands. Light header.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/ops.h"

namespace magi2 {

/// Sizes of a causal_conv1d call: rows L, channels C, kernel K.
struct Conv1dCausalDims {
  int64_t rows = 0, channels = 0, kernel = 0;
};
/// Checks CausalConv1dParams on `device` (x, y [L, C] row-strided ok, w [C, K]
/// contiguous, all bf16 or all f32).
Conv1dCausalDims check_causal_conv1d(const CausalConv1dParams& p, Device device);

/// Sizes of a gated_delta_rule call: tokens, key/value heads and head dims.
struct DeltaRuleDims {
  int64_t len = 0, hk = 0, hv = 0, dk = 0, dv = 0;
};
/// Checks GatedDeltaRuleParams on `device` (q, k [L, Hk*dk], v, o [L, Hv*dv],
/// a, b [L, Hv], one float dtype; A_log, dt_bias [Hv] f32; chunk_size >= 1).
DeltaRuleDims check_gated_delta_rule(const GatedDeltaRuleParams& p, Device device);

/// Checks GatedRmsNormParams on `device`; returns the head width d.
int64_t check_gated_rms_norm(const GatedRmsNormParams& p, Device device);

/// Sizes of a rotary call: rows, head dim, rotary_dim / 2.
struct RotaryDims {
  int64_t rows = 0, head_dim = 0, half = 0;
};
/// Checks RotaryParams on `device` (x [T, H*hd] bf16|f32, inv_freq [rot/2] f32).
RotaryDims check_rotary(const RotaryParams& p, Device device);

/// Sizes of a causal_attention call: tokens, query heads, kv heads, head dim.
struct CausalAttentionDims {
  int64_t t = 0, h = 0, hkv = 0, hd = 0;
};
/// Checks CausalAttentionParams on `device` (H a multiple of Hkv, one float dtype).
CausalAttentionDims check_causal_attention(const CausalAttentionParams& p, Device device);

/// Checks the operands of sigmoid_mul / silu_mul (`op` names them): x, g, out
/// [R, C] on `device`, all bf16 or all f32.
void check_gated_product(const Tensor& x, const Tensor& g, const Tensor& out, const char* op, Device device);

}  // namespace magi2
