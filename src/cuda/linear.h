// The CUDA backend's grouped linear (cuBLASLt). Internal to src/cuda/.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>

#include "cuda/fused_kernels.h"
#include "cuda/moe_fp8_gemm.h"
#include "ops/ops.h"

namespace magi2::cuda {

/// Runs LinearParams (spec magi2-dit.md §4.2) as one cuBLASLt matmul per
/// non-empty row group on stream `s`: bf16 x bf16 -> bf16 or f32 x f32 -> f32,
/// fp32 compute, one rounding to y's dtype; optional f32 bias on the f32 path
/// (added after the rounded fp32 product, as the CPU does). The algorithm per
/// shape is chosen once by cuBLASLt's heuristic and cached, so later calls of
/// that shape do no host-side search (and can be captured in a CUDA graph).
/// `workspace` is device memory owned by the caller, live as long as this runner.
///
/// FP8 weights (LinearParams::w_scale; `--linear-compute fp8`): x is quantised
/// per row and 1 x 128 group into a scratch from `alloc` (quantize_rows_fp8),
/// then one CUTLASS blockwise-scaled grouped GEMM covers every row group
/// (make_fp8_linear_gemm_bf16, planned per shape with its device row offsets).
/// in and out must be multiples of 128. The plan and the scratch are made by
/// the first call of a shape, which must run outside graph capture (an eager
/// forward first, as for the routed experts); a capture that needs one fails
/// with an Error.
class LinearRunner {
 public:
  LinearRunner(void* workspace, size_t workspace_bytes, DeviceAlloc alloc);
  ~LinearRunner();
  LinearRunner(const LinearRunner&) = delete;
  LinearRunner& operator=(const LinearRunner&) = delete;

  void run(const LinearParams& p, cudaStream_t s);

 private:
  void gemm(const Tensor& x, const Tensor& w, const Tensor& y, int64_t w_row0, int64_t rows, cudaStream_t s);
  void run_fp8(const LinearParams& p, cudaStream_t s);

  // One FP8 GEMM plan: the CUTLASS arrays and the row groups' device offsets [G + 1].
  struct Fp8Plan {
    std::unique_ptr<Fp8ExpertGemm> gemm;
    std::shared_ptr<void> offsets;
  };
  // out, in, y's row stride, the group boundaries cu[0..3]
  using Fp8Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int>;  // rows, in, out, ldx, ldy, dtype | alignments
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, std::shared_ptr<void>> algos_;  // cublasLtMatmulAlgo_t per shape
  DeviceAlloc alloc_;
  SplitScratch act8_;  // FP8: the e4m3 rows of x and their group scales
  std::map<Fp8Key, Fp8Plan> fp8_plans_;
};

}  // namespace magi2::cuda
