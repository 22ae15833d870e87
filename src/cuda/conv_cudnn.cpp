// conv3d through cuDNN (conv_runner.h). The legacy convolution API of cudnn.h
// (deprecated in cuDNN 9 but shipped: a plain header, no frontend to compile)
// describes our channels-last buffers as they are: x [1, C_in, T, H, W] with
// NDHWC strides, the filter [C_out, C_in, kT, kH, kW] in CUDNN_TENSOR_NHWC
// (memory [C_out, kT, kH, kW, C_in], our layout), y [1, C_out, T', H', W']
// NDHWC; bf16 data, fp32 compute, tensor-op math. The algorithm is cuDNN's
// first heuristic choice that fits 2 GiB of workspace, cached per shape.
#include "cuda/conv_runner.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "cuda/cuda_common.h"
#include "ops/codec_checks.h"

#if MAGI2_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace magi2::cuda {

bool conv_cudnn_selected() {
  static const bool cudnn = [] {
    const char* v = std::getenv("MAGI2_CONV_KERNEL");
    const std::string s = v ? v : "";
    MAGI2_CHECK(s.empty() || s == "own" || s == "cudnn", "MAGI2_CONV_KERNEL must be own or cudnn, got '", s, "'");
    // cuDNN by default since the H200 run of 2026-12-02: TurboVAE at 272p 6.6 s -> 0.23 s, its bf16 frames
    // 0.019 rel-RMS from the CPU's (the CPU itself is within 0.05 of the official code); "own" = bit-exact.
    return s != "own";
  }();
  return cudnn;
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

struct ConvRunner::Impl {
  DeviceAlloc alloc;
  cudnnHandle_t handle = nullptr;
  std::shared_ptr<void> ws, pad;
  size_t ws_bytes = 0, pad_bytes = 0;
  std::map<ShapeKey, Choice> choices;

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
};

ConvRunner::ConvRunner(DeviceAlloc alloc) : impl_(std::make_unique<Impl>()) { impl_->alloc = std::move(alloc); }

ConvRunner::~ConvRunner() {
  if (impl_->handle) cudnnDestroy(impl_->handle);
}

bool ConvRunner::conv3d(const Conv3dParams& p, cudaStream_t s) {
  const Conv3dDims d = check_conv3d(p, Device::CUDA);
  if (p.x.dtype() != DType::BF16) return false;
  if (p.pad_front[1] != p.pad_back[1] || p.pad_front[2] != p.pad_back[2]) return false;
  const bool replicate = p.time_pad == TimePad::Replicate && (p.pad_front[0] > 0 || p.pad_back[0] > 0);
  if (!replicate && p.pad_front[0] != p.pad_back[0]) return false;
  const int64_t T = d.in[0], H = d.in[1], W = d.in[2];
  const int64_t tp = replicate ? T + p.pad_front[0] + p.pad_back[0] : T;  // frames cuDNN sees
  const int pad_t = replicate ? 0 : p.pad_front[0];
  if (tp * H * W * std::max(d.cin, d.cout) >= (int64_t{1} << 31) ||
      d.out[0] * d.out[1] * d.out[2] * d.cout >= (int64_t{1} << 31))
    return false;  // int strides in the legacy descriptors
  Impl& m = *impl_;
  if (!m.handle && !ok(cudnnCreate(&m.handle))) return false;
  if (!ok(cudnnSetStream(m.handle, s))) return false;

  Descriptors ds;
  if (!ok(cudnnCreateTensorDescriptor(&ds.x)) || !ok(cudnnCreateTensorDescriptor(&ds.y)) ||
      !ok(cudnnCreateFilterDescriptor(&ds.w)) || !ok(cudnnCreateConvolutionDescriptor(&ds.conv)))
    return false;
  const int wdims[5] = {static_cast<int>(d.cout), static_cast<int>(d.cin), static_cast<int>(d.kernel[0]),
                        static_cast<int>(d.kernel[1]), static_cast<int>(d.kernel[2])};
  const int pads[3] = {pad_t, p.pad_front[1], p.pad_front[2]};
  if (!set_ndhwc(ds.x, d.cin, tp, H, W) || !set_ndhwc(ds.y, d.cout, d.out[0], d.out[1], d.out[2]) ||
      !ok(cudnnSetFilterNdDescriptor(ds.w, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, 5, wdims)) ||
      !ok(cudnnSetConvolutionNdDescriptor(ds.conv, 3, pads, p.stride.data(), p.dilation.data(),
                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)) ||
      !ok(cudnnSetConvolutionMathType(ds.conv, CUDNN_TENSOR_OP_MATH)))
    return false;
  // cuDNN's own output size must be ours (it is, for symmetric padding).
  int od[5] = {};
  if (!ok(cudnnGetConvolutionNdForwardOutputDim(ds.conv, ds.x, ds.w, 5, od)) || od[1] != d.cout ||
      od[2] != d.out[0] || od[3] != d.out[1] || od[4] != d.out[2])
    return false;

  const ShapeKey key{T, H, W, d.cin, d.cout, d.kernel[0], d.kernel[1], d.kernel[2], p.stride[0], p.stride[1],
                     p.stride[2], p.dilation[0], p.dilation[1], p.dilation[2], p.pad_front[0] + 1000 * p.pad_back[0],
                     p.pad_front[1], p.pad_front[2] + (replicate ? 1000 : 0)};
  auto it = m.choices.find(key);
  if (it == m.choices.end()) {
    Choice c;
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    int n = 0;
    if (ok(cudnnGetConvolutionForwardAlgorithm_v7(m.handle, ds.x, ds.w, ds.conv, ds.y, 8, &n, perf)))
      for (int i = 0; i < n && !c.ok; ++i)
        if (ok(perf[i].status) && perf[i].memory <= kMaxWorkspace) c = {true, perf[i].algo, perf[i].memory};
    if (!c.ok)
      std::fprintf(stderr, "magi2: cuDNN has no convolution for conv3d %s -> %s; using our kernel\n",
                   shape_str(p.x.shape()).c_str(), shape_str(p.y.shape()).c_str());
    it = m.choices.emplace(key, c).first;
  }
  if (!it->second.ok) return false;

  const void* x = p.x.data();
  if (replicate) {
    void* xp = m.grow(m.pad, m.pad_bytes, static_cast<size_t>(tp * H * W * d.cin) * 2);
    pad_time_replicate(x, xp, T, H * W * d.cin, p.pad_front[0], p.pad_back[0], 2, s);
    x = xp;
  }
  void* ws = m.grow(m.ws, m.ws_bytes, it->second.workspace);
  const float alpha = 1.f, beta = 0.f;
  const cudnnStatus_t st = cudnnConvolutionForward(m.handle, &alpha, ds.x, x, ds.w, p.w.data(), ds.conv,
                                                   it->second.algo, ws, it->second.workspace, &beta, ds.y,
                                                   p.y.data());
  if (!ok(st)) {
    // Nothing was enqueued: report once and let our kernel take this shape from now on.
    std::fprintf(stderr, "magi2: cuDNN conv3d %s failed (%s); using our kernel\n", shape_str(p.x.shape()).c_str(),
                 cudnnGetErrorString(st));
    it->second.ok = false;
    return false;
  }
  if (p.bias.defined())
    add_bias_bf16(static_cast<uint16_t*>(p.y.data()), static_cast<const uint16_t*>(p.bias.data()),
                  d.out[0] * d.out[1] * d.out[2], d.cout, s);
  return true;
}

#pragma GCC diagnostic pop

#else  // no cuDNN in this build: conv3d.cu runs every shape

struct ConvRunner::Impl {};
ConvRunner::ConvRunner(DeviceAlloc) : impl_(std::make_unique<Impl>()) {}
ConvRunner::~ConvRunner() = default;
bool ConvRunner::conv3d(const Conv3dParams&, cudaStream_t) { return false; }

#endif

}  // namespace magi2::cuda
