// The two producer kernels of attn_qkv (attn_glue.cu), for the parity test and
// bench_attention until the faster one is measured and made the default.
#pragma once

#include <cuda_runtime.h>

#include "ops/ops.h"

namespace magi2::cuda {

/// AttnQkvParams with a chosen kernel, same bytes either way: joint = false is
/// the default (one half-warp per (token, head, q|k|v), measured 1.25 ms at
/// 272p); joint = true does q, k and v of a (token, head) in one half-warp
/// (one source-row read, three 16-byte loads in flight, rope's partner
/// elements recomputed from the raw values), not yet measured on the H200.
void attn_qkv_variant(const AttnQkvParams& p, cudaStream_t s, bool joint);

}  // namespace magi2::cuda
