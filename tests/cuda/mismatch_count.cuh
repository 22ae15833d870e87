// The device counter of the exhaustive GPU checks (sigmoid_fast_check.cu,
// fp8_codec_check.cu): a zeroed unsigned long long the kernels add their
// mismatches to, and its read-back. Include only from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace magi2::test {

/// A zeroed device counter (enqueued on s), or null when the allocation fails.
inline unsigned long long* mismatch_counter(cudaStream_t s) {
  unsigned long long* d = nullptr;
  if (cudaMalloc(&d, sizeof(*d)) != cudaSuccess) return nullptr;
  cudaMemsetAsync(d, 0, sizeof(*d), s);
  return d;
}

/// The counter's value after the work enqueued on s (synchronises s) and frees it;
/// all ones for a null counter (the allocation failed).
inline uint64_t read_mismatches(unsigned long long* d, cudaStream_t s) {
  unsigned long long h = ~0ull;
  if (d == nullptr) return h;
  cudaMemcpyAsync(&h, d, sizeof(h), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  cudaFree(d);
  return h;
}

}  // namespace magi2::test
