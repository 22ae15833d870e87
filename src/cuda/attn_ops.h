// Entry points of the CUDA backend's attention-path ops (row gathers, RoPE,
// attention with sinks). Host-side declarations; kernels in rows.cu, rope.cu
// and attention.cu. Each enqueues on `s` and returns without a host wait.
#pragma once

#include <cuda_runtime.h>

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
/// AttentionParams: flash-attention-style fp32 online softmax (attention.cu).
void attention(const AttentionParams& p, cudaStream_t s);

}  // namespace magi2::cuda
