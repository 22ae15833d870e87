// W8A8 grouped GEMM over a flat FP8 bank of matrices (CUTLASS 3.x sm90
// ptr-array grouped GEMM with blockwise scaling, KernelPtrArrayTmaWarp-
// SpecializedCooperativeFP8Blockwise; problem shapes on the device): the FP8
// linears' fallback (linear_fp8_gemm.cu). The W8A8 routed experts ran on it
// until the fused kernel (moe_expert_fused_fp8.cu) replaced it. Host-only
// header: the CUTLASS types stay inside linear_fp8_gemm.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "cuda/moe_gemm.h"

namespace magi2::cuda {

/// One planned W8A8 expert GEMM (docs/fp8.md). With ExpertGemmShape's fields, group
/// g = f * parts + s computes, for the m_f = offsets[f + 1] - offsets[f] rows
/// starting at offsets[f],
///   D_g [m_f, n] = sum over K-blocks b of (A_f[:, b] . B_s[f][b, :]) * (sa[row, b] * sb_s[f][b, n / 128])
/// with fp32 accumulation, where
///   a      e4m3 [rows, k] row-major (k contiguous, row stride lda elements = bytes),
///   sa     f32 [rows, k / 128] (one scale per row and 1 x 128 group),
///   b[s]   e4m3 [F, n, k]: each expert's matrix K-major (the transpose of the
///          checkpoint's [k, n] bank: Hopper's FP8 wgmma reads both operands K-major),
///   sb[s]  f32 [F, k / 128, n / 128]: the checkpoint's `_scale_inv` as stored,
///   d      columns s*n .. (s+1)*n - 1 of rows offsets[f] .. (row stride ldd).
/// n, k must be multiples of 128, lda of 16. Arrays and workspace are allocated at
/// construction (never during capture); run() only enqueues kernels.
class Fp8ExpertGemm {
 public:
  virtual ~Fp8ExpertGemm() = default;
  /// Fills the per-group arrays from the device offsets [F + 1], then runs the GEMM on `s`.
  virtual void run(const int32_t* offsets, const void* a, const float* sa, const void* const* b,
                   const float* const* sb, void* d, cudaStream_t s) = 0;
};

/// bf16 output with K-major weight scales: sb[s] f32 [F, n / 128, k / 128] (the
/// 128 x 128 blocks of F stacked [n, k] matrices, a linear weight's [out, in]
/// layout: LinearParams::w_scale); everything else as above. The FP8 linears
/// (linear.cpp: F = the row groups). linear_fp8_gemm.cu.
std::unique_ptr<Fp8ExpertGemm> make_fp8_linear_gemm_bf16(const ExpertGemmShape& shape, const DeviceAlloc& alloc);

}  // namespace magi2::cuda
