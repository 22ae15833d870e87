// Entry points of the CUDA sampler ops (ops.h "Sampler ops"): the per-step work
// of the denoising loop around the DiT, on the device so a whole step captures
// into one CUDA graph. Host-side declarations; kernels in sampler.cu. The step
// index is read from the device counter, never on the host.
#pragma once

#include <cuda_runtime.h>

#include "ops/ops.h"

namespace magi2::cuda {

/// CopyElemsParams; an element whose source or destination index is outside
/// the tensors is skipped (no host check).
void copy_elems(const CopyElemsParams& p, cudaStream_t s);
/// FillRowsParams; rows outside `out` are skipped, a step outside the table copies nothing.
void fill_rows(const FillRowsParams& p, cudaStream_t s);
/// CfgCombineParams (numerics.h cfg_combine_f32, bit-identical to the CPU).
void cfg_combine(const CfgCombineParams& p, cudaStream_t s);
/// FlowUniPCStepParams (numerics.h flow_unipc_element, bit-identical to the CPU);
/// a step outside the table leaves the state unchanged.
void flow_unipc_step(const FlowUniPCStepParams& p, cudaStream_t s);
/// AdvanceStepParams: one single-thread kernel.
void advance_step(const AdvanceStepParams& p, cudaStream_t s);
/// NonfiniteCheckParams: a grid-wide scan, atomicMin on first[slot] (order-free, so deterministic).
void nonfinite_check(const NonfiniteCheckParams& p, cudaStream_t s);

}  // namespace magi2::cuda
