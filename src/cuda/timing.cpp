// CUDA-event timing for benchmarks and perf lines (one loop for every bench and
// test that reports a time).
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "cuda/backend_cuda.h"
#include "cuda/cuda_common.h"

namespace magi2 {

double cuda_median_ms(void* stream, const std::function<void()>& f, int reps, int warmup) {
  MAGI2_CHECK(reps >= 1, "cuda_median_ms: reps must be >= 1, got ", reps);
  auto s = static_cast<cudaStream_t>(stream);
  for (int i = 0; i < warmup; ++i) f();
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  MAGI2_CUDA_CHECK(cudaEventCreate(&e0));
  MAGI2_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> ms;
  ms.reserve(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    MAGI2_CUDA_CHECK(cudaEventRecord(e0, s));
    f();
    MAGI2_CUDA_CHECK(cudaEventRecord(e1, s));
    MAGI2_CUDA_CHECK(cudaEventSynchronize(e1));
    float v = 0;
    MAGI2_CUDA_CHECK(cudaEventElapsedTime(&v, e0, e1));
    ms.push_back(v);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  return n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
}

}  // namespace magi2
