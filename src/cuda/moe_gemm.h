// Grouped GEMM over a flat expert bank (CUTLASS 3.x sm90 ptr-array grouped
// GEMM, problem shapes on the device). Host-only header: the CUTLASS types
// stay inside the two instantiation files (moe_gemm_bf16.cu, moe_gemm_f32.cu)
// so the rest of the backend compiles without the CUTLASS headers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace magi2::cuda {

/// Hands out device memory owned by the returned pointer (the backend's cache).
using DeviceAlloc = std::function<std::shared_ptr<void>(size_t bytes)>;

/// The fixed part of one expert-bank GEMM. Group g = f * parts + s computes
/// D_g [m_f, n] = A_f [m_f, k] * B_s[f] [k, n] with m_f = offsets[f + 1] - offsets[f]:
/// A_f = rows offsets[f] .. of `a` (row stride lda elements, bf16), B_s[f] the
/// f-th [k, n] row-major bf16 matrix of bank s, D_g columns s*n .. (s+1)*n - 1
/// of rows offsets[f] .. of `d` (row stride ldd elements). fp32 accumulation.
struct ExpertGemmShape {
  int experts = 0;  ///< F, flat experts (heads x experts per head)
  int parts = 1;    ///< banks sharing A (2: gate and up)
  int64_t n = 0, k = 0;
  int64_t lda = 0, ldd = 0;
};

/// One planned grouped GEMM: the device problem/pointer/stride arrays and the
/// CUTLASS workspace are allocated and the kernel initialised at construction
/// (never during graph capture); run() only enqueues kernels, so it is capturable.
class ExpertGemm {
 public:
  virtual ~ExpertGemm() = default;
  /// Fills the per-group arrays from the device offsets [F + 1] (a small kernel),
  /// then runs the GEMM on `s`. b[s] points at bank s ([F, k, n] bf16).
  /// `row_scale` [rows] f32: the row-scale epilogue's scales (required by it,
  /// refused by the others: Error).
  virtual void run(const int32_t* offsets, const void* a, const void* const* b, void* d, cudaStream_t s,
                   const float* row_scale = nullptr) = 0;
};

/// bf16 output (W13: gate and up). Throws magi2::Error when CUTLASS cannot
/// implement the shape (alignment: k, n, lda, ldd multiples of 8). moe_gemm_bf16.cu.
std::unique_ptr<ExpertGemm> make_expert_gemm_bf16(const ExpertGemmShape& shape, const DeviceAlloc& alloc);
/// bf16 output through the SwiGLU7 epilogue (W13's gate half, after the up
/// half was written): one bank (parts 1, b[0] = the gate bank), and D_g [m_f, n]
/// = bf16(swiglu7(bf16(A_f B[f]), U)) where U [m_f, n] are the n bf16 columns
/// right after D_g's in the same rows of `d` (ldd >= 2n), with the SFU sigmoid
/// as expert_swiglu7. The gate never goes to memory. Errors as
/// make_expert_gemm_bf16, or a shape that breaks that layout. moe_gemm_swiglu7.cu.
std::unique_ptr<ExpertGemm> make_expert_gemm_swiglu7(const ExpertGemmShape& shape, const DeviceAlloc& alloc);
/// bf16 output through the row-scale epilogue (W2 with the routing weight):
/// D_g = bf16(A_f B[f] x row_scale[row]) with row_scale [rows] f32 in the
/// rows' (expert) order, passed to run(). One bank. moe_gemm_row_scale.cu.
std::unique_ptr<ExpertGemm> make_expert_gemm_row_scale(const ExpertGemmShape& shape, const DeviceAlloc& alloc);
/// fp32 output (W2: the routing weight is applied in fp32 by the combine). moe_gemm_f32.cu.
std::unique_ptr<ExpertGemm> make_expert_gemm_f32(const ExpertGemmShape& shape, const DeviceAlloc& alloc);

}  // namespace magi2::cuda
