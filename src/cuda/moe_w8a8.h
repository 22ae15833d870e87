// The W8A8 routed experts on the CUDA backend (docs/fp8.md): after the route
// sort of moe_grouped.cu, each (token, head) row is quantised to e4m3 per
// 1 x 128 group once and stored to its routes' rows in expert order, each expert bank is transposed to K-major e4m3 into a
// planned scratch (FP8 wgmma reads both operands K-major; the checkpoint
// stores [K, N]), and the fused kernel (moe_expert_fused_fp8.cu) runs W13,
// SwiGLU7, W2 and the routing weight per tile. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cuda/moe_gemm.h"  // DeviceAlloc
#include "ops/ops.h"

namespace magi2::cuda {

/// Enqueues on `s` the rewrite of the three FP8 banks of `p` (checkpoint
/// layout, checked shapes: W_gate/W_up [F, DH, DE], W_down [F, DE, DH] e4m3)
/// into the fused kernel's K-major layout (ExpertBankLayout::KMajorW8a8):
/// `gate_t`, `up_t` [F, DE, DH] and `down_t` [F, DH, DE] with each 32 columns
/// of a row in fp8_vt_key order; F DH DE bytes each, not overlapping the
/// sources. DH and DE multiples of 64. Capturable.
void w8a8_banks_to_k_major(const MoeExpertsParams& p, uint8_t* gate_t, uint8_t* up_t, uint8_t* down_t,
                           cudaStream_t s);

/// The planned W8A8 pass of one shape: F flat experts, at most max_rows routed
/// rows, d_head dh and d_expert de (moe_fused_fp8_expert_widths). Workspace:
/// the e4m3 rows [R, DH] and their scales [R, DH / 128] f32, allocated at
/// construction; for banks in the checkpoint layout also three transposed
/// e4m3 banks (3 F DH DE bytes: 3 GB at the release width), allocated by the
/// first transpose_banks. Never allocates during graph capture.
class MoeW8a8 {
 public:
  /// Whether the W8A8 path handles these widths (the fused kernel's, CUTLASS built in).
  static bool supports(int64_t dh, int64_t de);
  MoeW8a8(int experts, int64_t max_rows, int64_t dh, int64_t de, const DeviceAlloc& alloc);
  ~MoeW8a8();
  MoeW8a8(const MoeW8a8&) = delete;
  MoeW8a8& operator=(const MoeW8a8&) = delete;

  /// Enqueues the transposition of the three FP8 banks of `p` (checkpoint
  /// layout) to K-major into the scratch on `s` (w8a8_banks_to_k_major): once
  /// per layer call, before its token passes' run(). Every expert, so the bytes
  /// do not depend on the routing. Capturable once the scratch exists (Error
  /// naming the capture otherwise).
  void transpose_banks(const MoeExpertsParams& p, cudaStream_t s);

  /// Enqueues the quantising scatter and the fused kernel of one token pass on
  /// `s` for checked params with FP8 banks, K-major (ExpertBankLayout::
  /// KMajorW8a8) or in the checkpoint layout after transpose_banks: `pos`
  /// [MH, T, k] the expert-ordered row of each (head, token, slot) route (-1:
  /// no valid expert), `offsets` [F + 1] the expert row offsets, `wrow` [R]
  /// the rows' routing weights (all three from the route sort), `y` [R, DH]
  /// bf16 receives bf16(Y x weight) for the weighted combine, `tile_start`
  /// [F + 1] int32 scratch. `mark(i)` as MoeExpertsRunner::run: 0 the
  /// quantising scatter, 1-3 the kernel. No host sync, no allocation: capturable.
  void run(const MoeExpertsParams& p, const int32_t* offsets, const int32_t* pos, const float* wrow, uint16_t* y,
           int32_t* tile_start, cudaStream_t s, const std::function<void(int)>& mark);

 private:
  int experts_ = 0;
  int64_t max_rows_ = 0, dh_ = 0, de_ = 0;
  void* take(size_t bytes);  // a 256-byte-rounded block owned by this pass

  DeviceAlloc alloc_;
  std::vector<std::shared_ptr<void>> owned_;
  uint8_t* xq_ = nullptr;  // [R, DH] e4m3
  float* xs_ = nullptr;    // [R, DH / 128]
  uint8_t* bt_ = nullptr;  // checkpoint-layout banks only: W_gate^T, W_up^T [F, DE, DH], W_down^T [F, DH, DE]
};

}  // namespace magi2::cuda
