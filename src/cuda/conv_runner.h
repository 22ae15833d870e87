// The cuDNN path of conv3d (conv_cudnn.cpp; docs/cuda.md "The codecs on the
// GPU"), chosen by MAGI2_CONV_KERNEL=cudnn (default "own": conv3d.cu, the CPU's
// bytes). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "cuda/moe_gemm.h"
#include "ops/ops.h"

namespace magi2::cuda {

/// conv3d through cuDNN's convolution forward (the legacy API, cudnn.h):
/// bf16 NDHWC operands on the tensor cores with fp32 accumulation, the output
/// rounded to bf16 once, then y = bf16(y + bias) (the bias after the rounded
/// conv result, as the CPU). TimePad::Replicate frames are materialised in a
/// padded copy of x first (cuDNN pads with zeros only). Workspace and the
/// padded copy come from `alloc` (the backend's caching allocator) and grow on
/// demand without a host wait (every user runs on the one stream). cuDNN sums
/// in its own order: within a bf16 ulp or two of the CPU, not its bytes.
class ConvRunner {
 public:
  explicit ConvRunner(DeviceAlloc alloc);
  ~ConvRunner();
  ConvRunner(const ConvRunner&) = delete;
  ConvRunner& operator=(const ConvRunner&) = delete;

  /// Runs p (checked with check_conv3d here) on cuDNN. False when it does not
  /// apply: f32 operands, H/W padding that differs front and back, zero time
  /// padding that does, a build without cuDNN, or a shape cuDNN refuses
  /// (reported once per shape on stderr); the caller then runs conv3d.cu.
  bool conv3d(const Conv3dParams& p, cudaStream_t s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// MAGI2_CONV_KERNEL: true = "cudnn" (also when unset), false = "own". Read
/// once per process; any other value is an Error naming the variable.
bool conv_cudnn_selected();

/// xp [T + front + back, frame] = x [T, frame] with the first / last frame
/// repeated front / back times; elements of `elem` bytes (2 or 4). conv3d.cu.
void pad_time_replicate(const void* x, void* xp, int64_t T, int64_t frame_elems, int front, int back, size_t elem,
                        cudaStream_t s);
/// y[r, c] = bf16(y[r, c] + bias[c]) over y [rows, cols] bf16 contiguous. conv3d.cu.
void add_bias_bf16(uint16_t* y, const uint16_t* bias, int64_t rows, int64_t cols, cudaStream_t s);

}  // namespace magi2::cuda
