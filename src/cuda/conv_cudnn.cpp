// conv3d through cuDNN (conv_runner.h). The legacy convolution API of cudnn.h
// (deprecated in cuDNN 9 but shipped: a plain header, no frontend to compile)
// describes our channels-last buffers as they are: x [1, C_in, T, H, W] with
// NDHWC strides, the filter [C_out, C_in, kT, kH, kW] in CUDNN_TENSOR_NHWC
// (memory [C_out, kT, kH, kW, C_in], our layout), y [1, C_out, T', H', W']
// NDHWC; bf16 data, fp32 compute, tensor-op math. The algorithm is cuDNN's
// first heuristic choice that fits 2 GiB of workspace, cached per shape. A
// conv over 2^31 elements (int strides) runs as slices of its output frames.
#include "cuda/conv_runner.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "cuda/cuda_common.h"
#include "cuda/env_choice.h"
#include "ops/codec_checks.h"

#if MAGI2_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace magi2::cuda {

bool conv_cudnn_selected() {
  // cuDNN by default since the H200 run of 2026-12-02: TurboVAE at 272p 6.6 s -> 0.23 s, its bf16 frames
  // 0.019 rel-RMS from the CPU's (the CPU itself is within 0.05 of the official code); "own" = bit-exact.
  return env_choice("MAGI2_CONV_KERNEL", {"own", "cudnn"}) != 0;
}

std::vector<ConvTimeSlice> conv_time_slices(int64_t out_frames, int64_t in_frame_elems, int64_t out_frame_elems,
                                            int64_t kt, int stride_t, int dilation_t, int64_t max_elems) {
  std::vector<ConvTimeSlice> out;
  if (out_frames <= 0 || in_frame_elems <= 0 || out_frame_elems <= 0 || kt < 1 || stride_t < 1 || dilation_t < 1)
    return out;
  const int64_t reach = (kt - 1) * dilation_t + 1;  // input frames under one output frame
  const int64_t max_in = (max_elems - 1) / in_frame_elems;
  if (max_in < reach) return out;
  const int64_t most = std::min((max_in - reach) / stride_t + 1, (max_elems - 1) / out_frame_elems);
  if (most < 1) return out;
  // Even slices (at most two distinct lengths: fewer shapes for cuDNN to plan).
  const int64_t count = (out_frames + most - 1) / most;
  for (int64_t i = 0, o = 0; i < count; ++i) {
    const int64_t e = o + out_frames / count + (i < out_frames % count ? 1 : 0);
    out.push_back(
        {.out_begin = o, .out_end = e, .in_begin = o * stride_t, .in_frames = (e - o - 1) * stride_t + reach});
    o = e;
  }
  return out;
}

#if MAGI2_HAVE_CUDNN

// The legacy API is marked deprecated in cuDNN 9; it is what this file uses on purpose.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

constexpr size_t kMaxWorkspace = size_t{2} << 30;

// Every size of a call that cuDNN's choice depends on.
using ShapeKey = std::array<int64_t, 17>;

struct Choice {
  bool ok = false;
  cudnnConvolutionFwdAlgo_t algo{};
  size_t workspace = 0;
};

// The descriptors of one call, destroyed with it (creating them is host-only and cheap).
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;  // owns the handles
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

bool ok(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS; }

// An NDHWC bf16 tensor [1, c, t, h, w] described by its dims and strides.
bool set_ndhwc(cudnnTensorDescriptor_t d, int64_t c, int64_t t, int64_t h, int64_t w) {
  const int dims[5] = {1, static_cast<int>(c), static_cast<int>(t), static_cast<int>(h), static_cast<int>(w)};
  const int strides[5] = {static_cast<int>(t * h * w * c), 1, static_cast<int>(h * w * c), static_cast<int>(w * c),
                          static_cast<int>(c)};
  return ok(cudnnSetTensorNdDescriptor(d, CUDNN_DATA_BFLOAT16, 5, dims, strides));
}

}  // namespace

// One cudnnConvolutionForward: its descriptors and algorithm, and where its
// x (after any replicate copy) and y start, in frames.
struct Call {
  Descriptors ds;
  Choice* choice = nullptr;
  int64_t in_begin = 0, out_begin = 0;
};

struct ConvRunner::Impl {
  DeviceAlloc alloc;
  cudnnHandle_t handle = nullptr;
  std::shared_ptr<void> ws, pad;
  size_t ws_bytes = 0, pad_bytes = 0;
  std::map<ShapeKey, Choice> choices;
  int64_t max_call_elements = kMaxCallElements;
  int64_t forward_calls = 0;  // cudnnConvolutionForward calls enqueued (tests read it)
  bool warned_size = false;   // a conv too large to slice was reported

  // At least `need` bytes in `buf`. A smaller old block goes back to the
  // backend's cache; whoever gets it next enqueues on the same stream after
  // the kernels still reading it, so no wait is needed.
  void* grow(std::shared_ptr<void>& buf, size_t& have, size_t need) {
    if (need > have || !buf) {
      buf = alloc(need > 0 ? need : 16);
      have = need;
    }
    return buf.get();
  }

  // Describes one call over what cuDNN sees, x [1, cin, tp, H, W] and y
  // [1, cout, to, Ho, Wo] (NDHWC) with time padding pad_t, and picks (once per
  // shape) its algorithm. False when cuDNN refuses it; host work only.
  bool plan(const Conv3dParams& p, const Conv3dDims& d, int64_t tp, int pad_t, int64_t to, Call& c) {
    const int64_t H = d.in[1], W = d.in[2];
    Descriptors& ds = c.ds;
    if (!ok(cudnnCreateTensorDescriptor(&ds.x)) || !ok(cudnnCreateTensorDescriptor(&ds.y)) ||
        !ok(cudnnCreateFilterDescriptor(&ds.w)) || !ok(cudnnCreateConvolutionDescriptor(&ds.conv)))
      return false;
    const int wdims[5] = {static_cast<int>(d.cout), static_cast<int>(d.cin), static_cast<int>(d.kernel[0]),
                          static_cast<int>(d.kernel[1]), static_cast<int>(d.kernel[2])};
    const int pads[3] = {pad_t, p.pad_front[1], p.pad_front[2]};
    if (!set_ndhwc(ds.x, d.cin, tp, H, W) || !set_ndhwc(ds.y, d.cout, to, d.out[1], d.out[2]) ||
        !ok(cudnnSetFilterNdDescriptor(ds.w, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, 5, wdims)) ||
        !ok(cudnnSetConvolutionNdDescriptor(ds.conv, 3, pads, p.stride.data(), p.dilation.data(),
                                            CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)) ||
        !ok(cudnnSetConvolutionMathType(ds.conv, CUDNN_TENSOR_OP_MATH)))
      return false;
    // cuDNN's own output size must be ours (it is, for symmetric padding).
    int od[5] = {};
    if (!ok(cudnnGetConvolutionNdForwardOutputDim(ds.conv, ds.x, ds.w, 5, od)) || od[1] != d.cout || od[2] != to ||
        od[3] != d.out[1] || od[4] != d.out[2])
      return false;
    // Keyed by what cuDNN sees: the frames after any replicate copy, its own time padding.
    const ShapeKey key{tp, H, W, d.cin, d.cout, d.kernel[0], d.kernel[1], d.kernel[2], p.stride[0], p.stride[1],
                       p.stride[2], p.dilation[0], p.dilation[1], p.dilation[2], pad_t, p.pad_front[1],
                       p.pad_front[2]};
    auto it = choices.find(key);
    if (it == choices.end()) {
      Choice ch;
      cudnnConvolutionFwdAlgoPerf_t perf[8];
      int n = 0;
      if (ok(cudnnGetConvolutionForwardAlgorithm_v7(handle, ds.x, ds.w, ds.conv, ds.y, 8, &n, perf)))
        for (int i = 0; i < n && !ch.ok; ++i)
          if (ok(perf[i].status) && perf[i].memory <= kMaxWorkspace) ch = {true, perf[i].algo, perf[i].memory};
      if (!ch.ok)
        std::fprintf(stderr, "magi2: cuDNN has no convolution for conv3d %s -> %s (%lld input frames a call); "
                     "using our kernel\n", shape_str(p.x.shape()).c_str(), shape_str(p.y.shape()).c_str(),
                     static_cast<long long>(tp));
      it = choices.emplace(key, ch).first;
    }
    c.choice = &it->second;
    return it->second.ok;
  }
};

ConvRunner::ConvRunner(DeviceAlloc alloc, int64_t max_call_elements) : impl_(std::make_unique<Impl>()) {
  impl_->alloc = std::move(alloc);
  impl_->max_call_elements = max_call_elements;
}

ConvRunner::~ConvRunner() {
  if (impl_->handle) cudnnDestroy(impl_->handle);
}

bool ConvRunner::conv3d(const Conv3dParams& p, cudaStream_t s) {
  const Conv3dDims d = check_conv3d(p, Device::CUDA);
  if (p.x.dtype() != DType::BF16) return false;
  if (p.pad_front[1] != p.pad_back[1] || p.pad_front[2] != p.pad_back[2]) return false;
  const bool replicate = p.time_pad == TimePad::Replicate && (p.pad_front[0] > 0 || p.pad_back[0] > 0);
  if (!replicate && p.pad_front[0] != p.pad_back[0]) return false;
  Impl& m = *impl_;
  const int64_t T = d.in[0], H = d.in[1], W = d.in[2];
  const int64_t tp = replicate ? T + p.pad_front[0] + p.pad_back[0] : T;  // frames cuDNN sees
  const int pad_t = replicate ? 0 : p.pad_front[0];
  // The legacy descriptors take int strides: one call stays under 2^31
  // elements (input counted at max(C_in, C_out), as this bound always was).
  // A larger conv runs as several calls over consecutive output frames, each
  // reading its own window of the (padded) input: at 1080p the decoder's
  // 36 x 544 x 960 x 128 convs used to fall back to our CUDA-core kernel here
  // (~30x slower than cuDNN: decode_video took 67.6 s on the H200). Slicing
  // needs cuDNN's time padding to be zero (a replicate pad is materialised
  // first, so it is); a too-large zero-padded conv still falls back.
  const int64_t in_frame = H * W * std::max(d.cin, d.cout), out_frame = d.out[1] * d.out[2] * d.cout;
  std::vector<ConvTimeSlice> slices;
  if (tp * in_frame < m.max_call_elements && d.out[0] * out_frame < m.max_call_elements)
    slices.push_back({.out_begin = 0, .out_end = d.out[0], .in_begin = 0, .in_frames = tp});  // one call, as ever
  else if (pad_t == 0)
    slices = conv_time_slices(d.out[0], in_frame, out_frame, d.kernel[0], p.stride[0], p.dilation[0],
                              m.max_call_elements);
  if (slices.empty()) {
    // Say so once: this fallback used to be silent, and it is ~30x slower.
    if (!m.warned_size)
      std::fprintf(stderr,
                   "magi2: conv3d %s -> %s is too large for cuDNN calls of < %lld elements; using our kernel\n",
                   shape_str(p.x.shape()).c_str(), shape_str(p.y.shape()).c_str(),
                   static_cast<long long>(m.max_call_elements));
    m.warned_size = true;
    return false;
  }
  if (!m.handle && !ok(cudnnCreate(&m.handle))) return false;
  if (!ok(cudnnSetStream(m.handle, s))) return false;

  // Plan every call before enqueueing anything: a refused shape costs no GPU work.
  std::vector<Call> calls(slices.size());
  for (size_t i = 0; i < slices.size(); ++i) {
    const ConvTimeSlice& c = slices[i];
    calls[i].in_begin = c.in_begin;
    calls[i].out_begin = c.out_begin;
    if (!m.plan(p, d, c.in_frames, pad_t, c.out_end - c.out_begin, calls[i])) return false;
  }
  const char* x = static_cast<const char*>(p.x.data());
  if (replicate) {
    void* xp = m.grow(m.pad, m.pad_bytes, static_cast<size_t>(tp * H * W * d.cin) * 2);
    pad_time_replicate(x, xp, T, H * W * d.cin, p.pad_front[0], p.pad_back[0], 2, s);
    x = static_cast<const char*>(xp);
  }
  const size_t x_frame_bytes = static_cast<size_t>(H * W * d.cin) * 2;
  const size_t y_frame_bytes = static_cast<size_t>(out_frame) * 2;
  for (Call& c : calls) {
    void* ws = m.grow(m.ws, m.ws_bytes, c.choice->workspace);
    const float alpha = 1.f, beta = 0.f;
    const cudnnStatus_t st = cudnnConvolutionForward(
        m.handle, &alpha, c.ds.x, x + c.in_begin * x_frame_bytes, c.ds.w, p.w.data(), c.ds.conv, c.choice->algo, ws,
        c.choice->workspace, &beta, c.ds.y, static_cast<char*>(p.y.data()) + c.out_begin * y_frame_bytes);
    if (!ok(st)) {
      // This call enqueued nothing; earlier slices' writes are overwritten by
      // our kernel, which then runs the whole conv after them in stream order.
      std::fprintf(stderr, "magi2: cuDNN conv3d %s failed (%s); using our kernel\n", shape_str(p.x.shape()).c_str(),
                   cudnnGetErrorString(st));
      c.choice->ok = false;
      return false;
    }
    ++m.forward_calls;
  }
  if (p.bias.defined())
    add_bias_bf16(static_cast<uint16_t*>(p.y.data()), static_cast<const uint16_t*>(p.bias.data()),
                  d.out[0] * d.out[1] * d.out[2], d.cout, s);
  return true;
}

int64_t ConvRunner::forward_calls() const { return impl_->forward_calls; }

#pragma GCC diagnostic pop

#else  // no cuDNN in this build: conv3d.cu runs every shape

struct ConvRunner::Impl {};
ConvRunner::ConvRunner(DeviceAlloc, int64_t) : impl_(std::make_unique<Impl>()) {}
ConvRunner::~ConvRunner() = default;
bool ConvRunner::conv3d(const Conv3dParams&, cudaStream_t) { return false; }
int64_t ConvRunner::forward_calls() const { return 0; }

#endif

}  // namespace magi2::cuda
