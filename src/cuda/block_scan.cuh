// One-block exclusive scan over n counts (device code): the expert offsets of
// the routed experts' counting sort and the tile starts of the fused W13 +
// SwiGLU7 kernel. Integer sums, so the result does not depend on the order.
#pragma once

#include <cstdint>

namespace magi2::cuda::dev {

/// Run by all kThreads threads of one block (blockDim.x == kThreads): out[i] =
/// count(0) + ... + count(i - 1) for i < n, out[n] = the total. count(i) must
/// be a pure function of i; each thread sums a contiguous run of counts, then
/// the block scans the runs (Hillis-Steele in shared memory).
template <int kThreads, class Count>
__device__ void block_exclusive_scan(int n, Count count, int32_t* __restrict__ out) {
  __shared__ int32_t part[kThreads];
  const int per = (n + kThreads - 1) / kThreads;
  const int b = min(static_cast<int>(threadIdx.x) * per, n), e = min(b + per, n);
  int32_t s = 0;
  for (int i = b; i < e; ++i) s += count(i);
  part[threadIdx.x] = s;
  __syncthreads();
  for (int off = 1; off < kThreads; off *= 2) {  // inclusive scan of the runs
    const int32_t v = static_cast<int>(threadIdx.x) >= off ? part[threadIdx.x - off] : 0;
    __syncthreads();
    part[threadIdx.x] += v;
    __syncthreads();
  }
  int32_t run = part[threadIdx.x] - s;
  for (int i = b; i < e; ++i) {
    out[i] = run;
    run += count(i);
  }
  if (threadIdx.x == kThreads - 1) out[n] = part[kThreads - 1];
}

}  // namespace magi2::cuda::dev
