// Entry points of the CUDA mHC (spec magi2-dit.md §9) and multi-head MoE
// (§8.2-8.4) kernels. Host-only header (no device code): backend_cuda.cpp
// includes it with the plain C++ compiler. Each function checks shapes,
// enqueues its kernels on `s` and returns without waiting; every tensor
// (weights and scalars included) lives on the device. Bytes equal the CPU
// backend's (src/cpu/mhc.cpp, src/cpu/moe.cpp) on valid input (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include "ops/ops.h"

namespace magi2::cuda {

/// MhcLogitsParams on the device (one block per token). mhc.cu.
void mhc_logits(const MhcLogitsParams& p, cudaStream_t s);
/// MhcPreParams on the device; alpha/bias are read on the device. mhc.cu.
void mhc_pre(const MhcPreParams& p, cudaStream_t s);
/// MhcPostResParams on the device (Sinkhorn per token, then the in-place state update). mhc.cu.
void mhc_post_res(const MhcPostResParams& p, cudaStream_t s);
/// MoeRouteParams on the device. Out-of-range forced indices are clamped to
/// [0, E) without the CPU backend's error (checking them would need a host sync). moe.cu.
void moe_route(const MoeRouteParams& p, cudaStream_t s);
/// MoeExpertsParams on the device. A route whose expert index is outside
/// [0, E) contributes nothing (the CPU backend throws instead; no host sync here). moe.cu.
void moe_experts(const MoeExpertsParams& p, cudaStream_t s);

}  // namespace magi2::cuda
