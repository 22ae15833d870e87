// The CUDA backend's grouped linear (cuBLASLt). Internal to src/cuda/.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>

#include "ops/ops.h"

namespace magi2::cuda {

/// Runs LinearParams (spec magi2-dit.md §4.2) as one cuBLASLt matmul per
/// non-empty row group on stream `s`: bf16 x bf16 -> bf16 or f32 x f32 -> f32,
/// fp32 compute, one rounding to y's dtype; optional f32 bias on the f32 path
/// (added after the rounded fp32 product, as the CPU does). The algorithm per
/// shape is chosen once by cuBLASLt's heuristic and cached, so later calls of
/// that shape do no host-side search (and can be captured in a CUDA graph).
/// `workspace` is device memory owned by the caller, live as long as this runner.
class LinearRunner {
 public:
  LinearRunner(void* workspace, size_t workspace_bytes);
  ~LinearRunner();
  LinearRunner(const LinearRunner&) = delete;
  LinearRunner& operator=(const LinearRunner&) = delete;

  void run(const LinearParams& p, cudaStream_t s);

 private:
  void gemm(const Tensor& x, const Tensor& w, const Tensor& y, int64_t w_row0, int64_t rows, cudaStream_t s);

  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int>;  // rows, in, out, ldx, ldy, dtype | alignments
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, std::shared_ptr<void>> algos_;  // cublasLtMatmulAlgo_t per shape
};

}  // namespace magi2::cuda
