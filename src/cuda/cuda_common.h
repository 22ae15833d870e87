// Internal helpers of the CUDA backend: error checks, the per-op plumbing
// shared by kernel files. Host-side only (no device code), so .cpp files of
// src/cuda/ can include it with the plain C++ compiler.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/op_checks.h"
#include "ops/ops.h"

/// Throws magi2::Error naming the call and CUDA's message when `expr` fails.
#define MAGI2_CUDA_CHECK(expr)                                                                  \
  do {                                                                                          \
    const cudaError_t magi2_err_ = (expr);                                                      \
    if (magi2_err_ != cudaSuccess)                                                              \
      throw ::magi2::Error(::magi2::str_cat("CUDA error in ", #expr, ": ",                     \
                                            cudaGetErrorString(magi2_err_)));                   \
  } while (0)

/// Checks the launch just enqueued (bad configuration, missing kernel image).
#define MAGI2_CUDA_CHECK_LAUNCH(what)                                                           \
  do {                                                                                          \
    const cudaError_t magi2_err_ = cudaGetLastError();                                          \
    if (magi2_err_ != cudaSuccess)                                                              \
      throw ::magi2::Error(::magi2::str_cat("CUDA backend: ", what, " launch failed: ",       \
                                            cudaGetErrorString(magi2_err_)));                   \
  } while (0)

namespace magi2::cuda {

/// Whether `s` is capturing a CUDA graph (false if the query itself fails).
inline bool stream_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(s, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone;
}

/// Throws Error(str_cat(message...)) while `s` captures a CUDA graph: the
/// first call of a shape allocates or plans (not capturable), so it must run
/// eagerly before capture. The message names what was missing and that fix.
template <typename... Message>
void check_not_capturing(cudaStream_t s, const Message&... message) {
  if (stream_capturing(s)) throw Error(str_cat(message...));
}

/// Checks that t is a 2-D device tensor [rows, cols] with unit column stride.
void check_2d(const Tensor& t, int64_t rows, int64_t cols, const char* what);
/// The row groups' bounds cu[0..3] packed for a kernel argument (device_fp.cuh group_of).
inline int4 cu_of(const Groups& g) {
  return make_int4(static_cast<int>(g.cu[0]), static_cast<int>(g.cu[1]), static_cast<int>(g.cu[2]),
                   static_cast<int>(g.cu[3]));
}
/// Checks that the row groups cover `rows` rows in order (at most 3 groups).
void check_groups(const Groups& g, int64_t rows, const char* what);
/// Whether t's rows start 16-byte aligned for 16-byte vector access of 2-byte
/// elements: an aligned base and a row stride that is a multiple of 8.
inline bool rows_aligned16(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0 && t.row_stride() % 8 == 0;
}
/// ceil(n / per) blocks for a launch; throws naming `what` past 2^31 - 1.
inline unsigned launch_blocks(int64_t n, int64_t per, const char* what) {
  const int64_t b = (n + per - 1) / per;
  MAGI2_CHECK(b < (int64_t{1} << 31), what, ": too many rows for one launch (", n, ")");
  return static_cast<unsigned>(b);
}

// Op entry points, one family per file; each enqueues on `s` and returns.
void rms_norm(const RmsNormParams& p, cudaStream_t s);  // elementwise.cu
/// swiglu7: `fast` takes the sigmoid on the SFU (sigmoid_fast_f32: a few fp32 ulp, so a rare bf16
/// element moves by one ulp; MAGI2_SWIGLU7_KERNEL=fused) in the 16-byte kernel that serves aligned rows
/// (the DiT's); otherwise, and for rows it cannot take, the CPU's glibc-exact bytes. elementwise.cu.
void swiglu7(const SwiGLU7Params& p, cudaStream_t s, bool fast = false);
void gate(const GateParams& p, cudaStream_t s);         // elementwise.cu
void add(const AddParams& p, cudaStream_t s);           // elementwise.cu
void cast(const CastParams& p, cudaStream_t s);         // elementwise.cu
/// magi2::cuda_fill_random on `s` (checked there). random_fill.cu.
void fill_random(const Tensor& t, uint64_t seed, float stddev, cudaStream_t s);
/// Adds a per-group f32 bias to the rows of an f32 y (the f32 linear's epilogue).
void add_bias_f32(const Tensor& y, const Tensor& bias, const Groups& g, cudaStream_t s);  // elementwise.cu

}  // namespace magi2::cuda
