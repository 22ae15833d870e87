// Detection of non-finite values (NaN, +-Inf) in host tensors: the check that
// stops a run before a diverged latent is decoded or written, and that
// `inspect --check-values` runs over the weights.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace magi2 {

/// How many elements of a tensor are not finite, and the first of them.
struct NonFiniteCount {
  int64_t count = 0;   ///< NaN and +-Inf elements
  int64_t nan = 0;     ///< of which NaN
  int64_t first = -1;  ///< flat (row-major) index of the first one; -1 when none
};

/// Counts the NaN/Inf elements of a CPU tensor of any strides. F32, BF16, F16
/// and F8E4M3 are tested on their bits (no conversion, so signalling NaNs are
/// seen too; F8E4M3 has NaN but no Inf); integer and bool dtypes have none.
/// Error: a CUDA tensor (copy it to the host first).
NonFiniteCount count_nonfinite(const Tensor& t);

/// Throws magi2::Error "WHAT: N of M values are not finite (K NaN; first at
/// index I)" when `t` holds any non-finite value; `what` names the stream and
/// the step ("denoising step 3: video latent"). No-op otherwise.
void check_finite(const Tensor& t, const std::string& what);

}  // namespace magi2
