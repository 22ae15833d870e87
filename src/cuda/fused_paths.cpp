// The switches and the scratch of the opt-in fast kernels (fused_kernels.h).
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "cuda/cuda_common.h"
#include "cuda/env_choice.h"
#include "cuda/fused_kernels.h"

namespace magi2::cuda {

void* SplitScratch::get(size_t bytes, cudaStream_t s, const char* what) {
  if (bytes <= bytes_) return buf_.get();
  check_not_capturing(s, what, ": no scratch planned for ", bytes,
                      " bytes; run one eager forward at this shape before capturing a CUDA graph");
  MAGI2_CUDA_CHECK(cudaStreamSynchronize(s));  // earlier kernels may still read the old buffer
  buf_ = alloc_(bytes);
  bytes_ = bytes;
  return buf_.get();
}

bool fused_selected(const char* env_name, bool fused_default) {
  // mHC and router: fused by default since the H200 run of 2026-12-02 (golden
  // DiT step and loop within bounds, 272p step 2,054 -> 1,738 ms: docs/perf.md).
  const int c = env_choice(env_name, {"fused", "reference"});
  return c < 0 ? fused_default : c == 0;
}

}  // namespace magi2::cuda
