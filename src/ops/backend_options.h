// Run-time kernel choices of the compute backends. The library reads no
// environment: the front ends fill these from their flags (the magi2 CLI's
// arg table with MAGI2_* env mirrors, `magi2 serve`, the C API) through
// EngineOptions, or pass them to make_backend_for / make_cuda_backend.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"

namespace magi2 {

/// Choices of the CUDA backend (ignored by the CPU backend).
struct CudaOptions {
  /// Attention kernel [--cuda-attention, env MAGI2_CUDA_ATTENTION]: "auto"
  /// (the own Hopper flash kernel for the DiT's deferred-sink calls at head
  /// dim 128, cuDNN SDPA for other shapes it takes, else the fp32 kernel),
  /// "cudnn" (cuDNN SDPA where it applies, else the fp32 kernel) or "fp32"
  /// (always the fp32 kernel: the parity oracle). FP8 attention changes the
  /// numerics, so it is an op parameter (AttentionParams::fp8,
  /// --attention-compute), not a kernel choice. docs/cuda.md.
  std::string attention = "auto";
  /// Routed rows (T x MH x K) one pass of the routed experts takes; a call
  /// with more runs in equal token passes over one pass's workspace (at the
  /// release widths ~0.5 KB a row with the fused kernel: the sort buffers and
  /// its bf16 output; 7 KB on the GEMM path: the gathered rows, the W13 output,
  /// the fp32 W2 output). The bytes of the output do not depend on it.
  int64_t moe_max_rows = kDefaultMoeMaxRows;
  /// The default: one pass at 272p (2.15 M rows with both CFG branches, 2.2 M
  /// with an I2VA reference image), four at 540p (8.3 M rows, where one pass
  /// would take 56 GB).
  static constexpr int64_t kDefaultMoeMaxRows = 2500000;
};

/// Tokens of one routed-experts pass for a call of t tokens with `per_token`
/// routed rows each (MH x K) under a cap of `max_rows` rows: t when it fits,
/// else equal passes (the last may be shorter), each within the cap when one
/// token fits. The CUDA backend's passes and the memory plan both use it.
inline int64_t moe_pass_tokens(int64_t t, int64_t per_token, int64_t max_rows) {
  if (t * per_token <= max_rows) return t;
  const int64_t fit = max_rows / per_token > 0 ? max_rows / per_token : 1;
  const int64_t passes = (t + fit - 1) / fit;
  return (t + passes - 1) / passes;
}

/// Whether the CUDA backend's fused routed-expert kernel (src/cuda/
/// moe_expert_fused.h) takes these widths: d_head 256 (one shared-memory tile
/// of W13's K, W2's N), d_expert a multiple of 64 (pairs of 32-column chunks).
/// It runs for bf16 banks and FP8 banks dequantised to bf16 (W8A16); its
/// workspace has no gathered rows and no W13 output, which the memory plan
/// counts from this same rule.
inline bool moe_fused_expert_widths(int64_t dh, int64_t de) { return dh == 256 && de > 0 && de % 64 == 0; }

/// Whether the CUDA backend's W8A8 fused routed-expert kernel (src/cuda/
/// moe_expert_fused_fp8.cu, the only W8A8 path on CUDA) takes these widths:
/// d_head 256, d_expert a multiple of 128 (W_down's K-blocks) up to 8192.
inline bool moe_fused_fp8_expert_widths(int64_t dh, int64_t de) {
  return dh == 256 && de > 0 && de % 128 == 0 && de <= 8192;
}

/// Error (one line naming --cuda-attention) unless every choice is a known name.
inline void validate(const CudaOptions& o) {
  MAGI2_CHECK(o.attention == "auto" || o.attention == "cudnn" || o.attention == "fp32",
              "--cuda-attention must be auto, cudnn or fp32, got '", o.attention, "'");
  MAGI2_CHECK(o.moe_max_rows >= 1 && o.moe_max_rows < (int64_t{1} << 31),
              "CUDA backend: the routed rows of one MoE pass must be in [1, 2^31), got ", o.moe_max_rows);
}

}  // namespace magi2
