// The cuDNN path of conv3d (conv_cudnn.cpp; docs/cuda-stages.md "The codecs on the
// GPU"), the default (MAGI2_CONV_KERNEL=cudnn or unset; "own" runs conv3d.cu,
// the CPU's bytes). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

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
/// The most elements one cuDNN call may address: the legacy descriptors take
/// int strides (PyTorch's cuDNN convolution keeps the same bound).
inline constexpr int64_t kMaxCallElements = int64_t{1} << 31;

class ConvRunner {
 public:
  /// `max_call_elements` bounds one cuDNN call (see conv3d); a test passes a
  /// small one to make small convs run in slices.
  explicit ConvRunner(DeviceAlloc alloc, int64_t max_call_elements = kMaxCallElements);
  ~ConvRunner();
  ConvRunner(const ConvRunner&) = delete;
  ConvRunner& operator=(const ConvRunner&) = delete;

  /// Runs p (checked with check_conv3d here) on cuDNN. A conv whose input
  /// (frames x H x W x max(C_in, C_out)) or output reaches max_call_elements
  /// runs as several calls over consecutive output frames (conv_time_slices),
  /// each under the bound. False when it does not apply: f32 operands, H/W
  /// padding that differs front and back, zero time padding that does (or
  /// any zero time padding on a conv too large for one call), a single frame
  /// too large for one call, a build without cuDNN, or a shape cuDNN refuses
  /// (reported once per shape on stderr); the caller then runs conv3d.cu.
  bool conv3d(const Conv3dParams& p, cudaStream_t s);

  /// cudnnConvolutionForward calls enqueued so far (a sliced conv counts each slice).
  int64_t forward_calls() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Output frames [out_begin, out_end) of a conv computed from input frames
/// [in_begin, in_begin + in_frames) (the input already padded in time).
struct ConvTimeSlice {
  int64_t out_begin = 0, out_end = 0, in_begin = 0, in_frames = 0;
};

/// Splits a conv's `out_frames` output frames (time kernel kt, stride_t,
/// dilation_t, no time padding left to apply) into consecutive slices of
/// near-equal length, as few as keep each slice's input (in_frames x
/// in_frame_elems) and output ((out_end - out_begin) x out_frame_elems) below
/// `max_elems`. One slice when the whole conv fits; empty when even one output
/// frame does not, or for a non-positive size. Host-only.
std::vector<ConvTimeSlice> conv_time_slices(int64_t out_frames, int64_t in_frame_elems, int64_t out_frame_elems,
                                            int64_t kt, int stride_t, int dilation_t, int64_t max_elems);

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
