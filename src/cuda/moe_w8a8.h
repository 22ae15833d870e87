// The W8A8 routed experts on the CUDA backend (docs/fp8.md): after the route
// sort of moe_grouped.cu, the gathered rows are quantised to e4m3 per 1 x 128
// group, each expert bank is transposed to K-major e4m3 into a planned scratch
// (FP8 wgmma reads both operands K-major; the checkpoint stores [K, N]), the
// W13 and W2 grouped GEMMs run as CUTLASS sm90 blockwise-scaled FP8 GEMMs
// (moe_fp8_gemm.h), and a separate pass computes bf16(SwiGLU7(G, U)) and
// quantises it for W2. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cuda/moe_fp8_gemm.h"
#include "ops/ops.h"

namespace magi2::cuda {

/// A device buffer lent by the caller (nullptr / 0: none).
struct LentBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
};

/// The planned W8A8 pass of one shape: F flat experts, at most max_rows routed
/// rows, widths dh, de (multiples of 128). Workspace: the e4m3 rows [R, DH]
/// (in `rows` when it is large enough), their scales [R, DH / 128] f32, the
/// W13 output [R, 2 DE] bf16 (in `h` when large enough), Z in e4m3 written in
/// place over the start of each W13 output row, its scales [R, DE / 128] f32,
/// and two transposed e4m3 banks [F, DE, DH] (2 F DH DE bytes: 2 GB at the
/// release width). Allocated at construction: never during graph capture.
class MoeW8a8 {
 public:
  /// Whether the W8A8 grouped path handles these widths (multiples of 128, CUTLASS built in).
  static bool supports(int64_t dh, int64_t de);
  MoeW8a8(int experts, int64_t max_rows, int64_t dh, int64_t de, LentBuffer rows, LentBuffer h,
          const DeviceAlloc& alloc);
  ~MoeW8a8();
  MoeW8a8(const MoeW8a8&) = delete;
  MoeW8a8& operator=(const MoeW8a8&) = delete;

  /// Enqueues gather + quantise, W13, SwiGLU7 + quantise and W2 on `s` for
  /// checked params with FP8 banks: `src` [R] the source row (token * MH + head)
  /// of each expert-ordered row, `offsets` [F + 1] the expert row offsets (both
  /// from the route sort), `y` [R, DH] fp32 receives W2's output (unweighted,
  /// for the combine). `mark(i)` as MoeExpertsRunner::run: 0 gather, 1 W13,
  /// 2 SwiGLU7, 3 W2. No host sync, no allocation: capturable.
  void run(const MoeExpertsParams& p, const int32_t* offsets, const int32_t* src, float* y, cudaStream_t s,
           const std::function<void(int)>& mark);

 private:
  int experts_ = 0;
  int64_t max_rows_ = 0, dh_ = 0, de_ = 0;
  std::vector<std::shared_ptr<void>> owned_;
  uint8_t* xq_ = nullptr;  // [R, DH] e4m3
  float* xs_ = nullptr;    // [R, DH / 128]
  uint16_t* h_ = nullptr;  // [R, 2 DE] bf16; Z e4m3 over the first DE bytes of each row
  float* zs_ = nullptr;    // [R, DE / 128]
  uint8_t* bt_ = nullptr;  // two banks [F, DE, DH] e4m3 (W_gate, W_up transposed; then W_down)
  std::unique_ptr<Fp8ExpertGemm> w13_, w2_;
};

}  // namespace magi2::cuda
