// The switches and the scratch of the opt-in fast kernels (fused_kernels.h).
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "cuda/cuda_common.h"
#include "cuda/fused_kernels.h"

namespace magi2::cuda {

void* SplitScratch::get(size_t bytes, cudaStream_t s, const char* what) {
  if (bytes <= bytes_) return buf_.get();
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  MAGI2_CUDA_CHECK(cudaStreamIsCapturing(s, &cs));
  MAGI2_CHECK(cs == cudaStreamCaptureStatusNone, what, ": no scratch planned for ", bytes,
              " bytes; run one eager forward at this shape before capturing a CUDA graph");
  MAGI2_CUDA_CHECK(cudaStreamSynchronize(s));  // earlier kernels may still read the old buffer
  buf_ = alloc_(bytes);
  bytes_ = bytes;
  return buf_.get();
}

bool fused_selected(const char* env_name, bool fused_default) {
  static std::mutex mu;
  static std::map<std::string, bool> seen;
  const std::lock_guard<std::mutex> lock(mu);
  const auto it = seen.find(env_name);
  if (it != seen.end()) return it->second;
  const char* v = std::getenv(env_name);
  // mHC and router: fused by default since the H200 run of 2026-12-02 (golden
  // DiT step and loop within bounds, 272p step 2,054 -> 1,738 ms: docs/perf.md).
  bool fused = fused_default;
  if (v != nullptr && *v != '\0') {
    MAGI2_CHECK(std::strcmp(v, "fused") == 0 || std::strcmp(v, "reference") == 0, env_name, "='", v,
                "': expected 'fused' or 'reference'");
    fused = std::strcmp(v, "fused") == 0;
  }
  seen.emplace(env_name, fused);
  return fused;
}

}  // namespace magi2::cuda
