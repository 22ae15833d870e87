// The wide fused mHC logits kernel's launcher (mhc_logits_wide.cu), called by
// mhc_logits_fused (mhc_fused.cu) for MhcLogitsKernel::kWide. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace magi2::cuda {

/// Logits [t, 24] (row stride ldl) of the bf16 state [t, vw] (row stride lds,
/// 16-byte aligned rows, vw a multiple of 32) with the split weight units of
/// mhc_phi_split_kernel (`groups` weight groups, boundaries `cu`).
void launch_mhc_logits_wide(const uint16_t* state, int64_t lds, const uint4* split, float* logits, int64_t ldl,
                            int64_t vw, int4 cu, int groups, float eps, int64_t t, cudaStream_t s);

}  // namespace magi2::cuda
