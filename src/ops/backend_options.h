// Run-time kernel choices of the compute backends. The library reads no
// environment: the front ends fill these from their flags (the magi2 CLI's
// arg table with MAGI2_* env mirrors, `magi2 serve`, the C API) through
// EngineOptions, or pass them to make_backend_for / make_cuda_backend.
#pragma once

#include <string>

#include "core/error.h"

namespace magi2 {

/// Choices of the CUDA backend (ignored by the CPU backend).
struct CudaOptions {
  /// Attention kernel [--cuda-attention, env MAGI2_CUDA_ATTENTION]: "auto"
  /// (cuDNN SDPA where it applies, else the fp32 kernel) or "fp32" (always the
  /// fp32 kernel: the parity oracle). docs/cuda.md.
  std::string attention = "auto";
};

/// Error (one line naming --cuda-attention) unless every choice is a known name.
inline void validate(const CudaOptions& o) {
  MAGI2_CHECK(o.attention == "auto" || o.attention == "fp32", "--cuda-attention must be auto or fp32, got '",
              o.attention, "'");
}

}  // namespace magi2
