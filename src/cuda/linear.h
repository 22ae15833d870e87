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
/// unless its producer did (LinearParams::x8: its e4m3 rows are read in place,
/// its scales regrouped for cuBLASLt),
/// then each non-empty row group runs one cuBLASLt matmul with block scaling
/// (the weights' 128 x 128 blocks as CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
/// the activations' 1 x 128 groups as VEC128_32F; e4m3 x e4m3 -> bf16, fp32
/// accumulation). Where cuBLASLt offers no algorithm for a shape, or with
/// MAGI2_FP8_LINEAR_GEMM=cutlass, one CUTLASS blockwise-scaled grouped GEMM
/// covers every row group instead (make_fp8_linear_gemm_bf16). in and out must
/// be multiples of 128. The plan and the scratch are made by the first call of
/// a shape, which must run outside graph capture (an eager forward first, as
/// for the routed experts); a capture that needs one fails with an Error.
class LinearRunner {
 public:
  LinearRunner(void* workspace, size_t workspace_bytes, DeviceAlloc alloc);
  ~LinearRunner();
  LinearRunner(const LinearRunner&) = delete;
  LinearRunner& operator=(const LinearRunner&) = delete;

  void run(const LinearParams& p, cudaStream_t s);

  /// y = x W_m^T per row group as run(), but bf16 x and W [G*out, in] with an
  /// f32 y [rows, out]: the fp32 sums, not rounded (the mHC logits' split
  /// terms, mhc_logits_gemm.cpp). Same algorithm cache and capture rules.
  void run_f32_out(const Tensor& x, const Tensor& w, const Tensor& y, const Groups& groups, cudaStream_t s);

 private:
  void gemm(const Tensor& x, const Tensor& w, const Tensor& y, int64_t w_row0, int64_t rows, cudaStream_t s);
  void run_fp8(const LinearParams& p, cudaStream_t s);

  // One FP8 GEMM plan: either a cuBLASLt algorithm per row group (`lt`) or the
  // CUTLASS arrays and the row groups' device offsets [G + 1].
  struct Fp8Plan {
    bool lt = false;
    std::shared_ptr<void> lt_algo[3];  // cublasLtMatmulAlgo_t per non-empty group
    std::unique_ptr<Fp8ExpertGemm> gemm;
    std::shared_ptr<void> offsets;
  };
  Fp8Plan& fp8_plan(const LinearParams& p, cudaStream_t s);
  // ldx: the e4m3 rows' stride (in for the own quantiser's scratch, LinearParams::x8's otherwise).
  std::shared_ptr<void> fp8_lt_algo(int64_t rows, int64_t in, int64_t out, int64_t ldx, const void* y, int64_t ldy);
  void fp8_lt_gemm(const void* algo, const uint8_t* xq, const float* xs, const void* w, const float* ws,
                   void* y, int64_t rows, int64_t in, int64_t out, int64_t ldx, int64_t ldy, cudaStream_t s);
  // out, in, the e4m3 rows' stride, y's row stride, the group boundaries cu[0..3]
  using Fp8Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;  // rows, in, out, ldx, ldy, dtypes | alignments
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, std::shared_ptr<void>> algos_;  // cublasLtMatmulAlgo_t per shape
  DeviceAlloc alloc_;
  SplitScratch act8_;  // FP8: the e4m3 rows of x and their group scales
  SplitScratch wsc8_;  // FP8 on cuBLASLt: weight scales with a K-block stride padded to 4
  std::map<Fp8Key, Fp8Plan> fp8_plans_;
};

}  // namespace magi2::cuda
