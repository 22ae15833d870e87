// The CUDA backend (docs/cuda.md): one stream, device memory from a caching
// allocator, ops enqueued without host synchronisation. Every op of ops.h is
// implemented: the DiT's, the text encoder's and the codecs' (codec_ops.h).
#include "cuda/backend_cuda.h"

#include "cuda/allocator.h"
#include "cuda/attn_ops.h"
#include "cuda/codec_ops.h"
#include "cuda/conv_runner.h"
#include "cuda/copy_queue.h"
#include "cuda/cuda_common.h"
#include "cuda/linear.h"
#include "cuda/mhc_moe.h"
#include "cuda/moe_w8a8.h"
#include "cuda/sampler_ops.h"
#include "cuda/text_ops.h"
#include "cuda/upload.h"
#include "ops/op_checks.h"

namespace magi2 {
namespace cuda {

void check_2d(const Tensor& t, int64_t rows, int64_t cols, const char* what) {
  check_2d_on(Device::CUDA, t, rows, cols, what);
}

void check_groups(const Groups& g, int64_t rows, const char* what) { check_row_groups(g, rows, what); }

namespace {

// cuBLASLt workspace: enough for split-K on the DiT's GEMMs (cuBLAS suggests 32 MiB on Hopper).
constexpr size_t kGemmWorkspace = size_t{32} << 20;

// Row pitch in bytes of a 2-D tensor (row-strided or contiguous).
size_t pitch_of(const Tensor& t, const char* what) {
  MAGI2_CHECK(t.dim() == 2 && t.strides()[1] == 1, what, ": expected a contiguous or 2-D row-strided tensor, got ",
              shape_str(t.shape()));
  return static_cast<size_t>(t.row_stride()) * dtype_size(t.dtype());
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const CudaOptions& options) : device_(device) {
    validate(options);
    attention_kernel_ = options.attention == "fp32"    ? cuda::AttentionKernel::kFp32
                        : options.attention == "cudnn" ? cuda::AttentionKernel::kCudnn
                                                       : cuda::AttentionKernel::kAuto;
    int n = 0;
    MAGI2_CHECK(cudaGetDeviceCount(&n) == cudaSuccess && n > 0, "CUDA backend: no CUDA GPU is available");
    MAGI2_CHECK(device >= 0 && device < n, "CUDA backend: GPU ", device, " does not exist (", n, " present)");
    MAGI2_CUDA_CHECK(cudaSetDevice(device));
    MAGI2_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cache_ = std::make_shared<DeviceCache>(device);
    workspace_ = cache_->get(kGemmWorkspace);
    linear_ = std::make_unique<LinearRunner>(workspace_.get(), kGemmWorkspace,
                                             [cache = cache_](size_t bytes) { return cache->get(bytes); });
    moe_ = std::make_unique<MoeExpertsRunner>([cache = cache_](size_t bytes) { return cache->get(bytes); },
                                              options.moe_max_rows);
    scratch_ = std::make_unique<SplitScratch>([cache = cache_](size_t bytes) { return cache->get(bytes); });
    conv_ = std::make_unique<ConvRunner>([cache = cache_](size_t bytes) { return cache->get(bytes); });
    conv_cudnn_ = conv_cudnn_selected();
    fused_ = {.mhc = fused_selected("MAGI2_MHC_KERNEL"), .router = fused_selected("MAGI2_ROUTER_KERNEL"),
              .scratch = scratch_.get(), .linear = linear_.get()};
    swiglu7_fast_ = fused_selected("MAGI2_SWIGLU7_KERNEL");
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);  // pending ops may still use the workspace
    linear_.reset();
    moe_.reset();
    scratch_.reset();
    conv_.reset();
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::CUDA; }
  const char* name() const override { return "cuda"; }
  cudaStream_t stream() const { return stream_; }
  int ordinal() const { return device_; }
  const DeviceCache& cache() const { return *cache_; }
  DeviceCache& cache() { return *cache_; }

  Tensor alloc(const Shape& shape, DType dtype) override {
    // A buffer taken while a step is being captured would be recorded into the
    // graph and could be handed to someone else after its views are dropped.
    MAGI2_CHECK(!capturing(), "CUDA backend: alloc of ", shape_str(shape),
                " while capturing a step (plan every buffer before capture)");
    int64_t n = 1;
    for (int64_t d : shape) {
      MAGI2_CHECK(d >= 0, "CUDA backend: alloc: negative dimension in ", shape_str(shape));
      n *= d;
    }
    std::shared_ptr<void> block = cache_->get(static_cast<size_t>(n) * dtype_size(dtype));
    void* data = block.get();
    return Tensor::view_of(data, shape, dtype, std::move(block), Device::CUDA);
  }

  void zero(const Tensor& t) override {
    MAGI2_CHECK(t.device() == Device::CUDA && t.is_contiguous(), "zero: needs a contiguous CUDA tensor");
    MAGI2_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, t.nbytes(), stream_));
  }

  void copy(const CopyParams& p) override {
    MAGI2_CHECK(p.src.defined() && p.dst.defined(), "copy: src or dst is missing");
    MAGI2_CHECK(p.src.dtype() == p.dst.dtype() && p.src.shape() == p.dst.shape(), "copy: src ",
                shape_str(p.src.shape()), " ", dtype_name(p.src.dtype()), " does not match dst ",
                shape_str(p.dst.shape()), " ", dtype_name(p.dst.dtype()));
    // Both contiguous: one row of all the bytes; else rows of the 2-D views.
    size_t width = p.src.nbytes(), height = 1, spitch = width, dpitch = width;
    if (!(p.src.is_contiguous() && p.dst.is_contiguous())) {
      spitch = pitch_of(p.src, "copy.src");
      dpitch = pitch_of(p.dst, "copy.dst");
      width = static_cast<size_t>(p.src.size(1)) * dtype_size(p.src.dtype());
      height = static_cast<size_t>(p.src.size(0));
    }
    if (width == 0 || height == 0) return;
    MAGI2_CUDA_CHECK(cudaMemcpy2DAsync(p.dst.data(), dpitch, p.src.data(), spitch, width, height,
                                       cudaMemcpyDefault, stream_));
    // Host-bound results must be readable on return; a host source is staged by the
    // driver before cudaMemcpy2DAsync returns, so it needs no wait.
    if (p.dst.device() == Device::CPU) MAGI2_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void copy_many(const std::vector<CopyParams>& ps,
                 const std::function<void(size_t done, size_t total)>& progress) override {
    std::vector<CopyParams> rest;
    std::vector<HostUpload> ups;
    for (const CopyParams& p : ps) {
      if (p.src.device() == Device::CPU && p.dst.device() == Device::CUDA && p.src.is_contiguous() &&
          p.dst.is_contiguous() && p.src.nbytes() == p.dst.nbytes() && p.src.dtype() == p.dst.dtype())
        ups.push_back({p.src.data(), p.dst.data(), p.src.nbytes()});
      else
        rest.push_back(p);
    }
    MAGI2_CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier work may still read the destinations
    upload_parallel(ups, device_, progress);
    for (const CopyParams& p : rest) copy(p);
  }

  void synchronize() override { MAGI2_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  void mark(const char* region) override {
    if (!profiling_) return;
    cudaEvent_t e = nullptr;
    MAGI2_CUDA_CHECK(cudaEventCreate(&e));
    MAGI2_CUDA_CHECK(cudaEventRecord(e, stream_));
    marks_.emplace_back(region, e);
  }
  void profile_begin() {
    MAGI2_CHECK(!capturing(), "CUDA backend: profiling while capturing a step");
    profile_end();
    profiling_ = true;
    mark("(unmarked)");
  }
  std::map<std::string, double> profile_end() {
    std::map<std::string, double> ms;
    if (!profiling_) return ms;
    mark("(end)");
    profiling_ = false;
    MAGI2_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (size_t i = 0; i + 1 < marks_.size(); ++i) {
      float t = 0;
      MAGI2_CUDA_CHECK(cudaEventElapsedTime(&t, marks_[i].second, marks_[i + 1].second));
      ms[marks_[i].first] += t;
    }
    for (auto& m : marks_) cudaEventDestroy(m.second);
    marks_.clear();
    return ms;
  }

  std::unique_ptr<StepGraph> capture(std::function<void()> body) override;

  void rms_norm(const RmsNormParams& p) override { cuda::rms_norm(p, stream_); }
  void linear(const LinearParams& p) override { linear_->run(p, stream_); }
  void swiglu7(const SwiGLU7Params& p) override { cuda::swiglu7(p, stream_, swiglu7_fast_); }
  void mhc_logits(const MhcLogitsParams& p) override { cuda::mhc_logits(p, stream_, &fused_); }
  void mhc_pre(const MhcPreParams& p) override { cuda::mhc_pre(p, stream_, &fused_); }
  void mhc_post_res(const MhcPostResParams& p) override { cuda::mhc_post_res(p, stream_, &fused_); }
  void moe_route(const MoeRouteParams& p) override { cuda::moe_route(p, stream_, &fused_); }
  void moe_experts(const MoeExpertsParams& p) override { cuda::moe_experts(p, moe_.get(), stream_); }
  void moe_prefetch(const MoeExpertsParams& p) override {
    // Beside the own flash kernel (all of an SM's registers a CTA) the prefetch's blocks take whole
    // SMs from the attention: measured slower than dequantising inline, so it is on by default only
    // beside cuDNN (docs/fp8.md; MAGI2_FP8_PREFETCH=0/1 overrides).
    if (moe_) moe_->prefetch(p, stream_, attention_kernel_ != cuda::AttentionKernel::kAuto);
  }
  void moe_prepare_banks(MoeExpertsParams& p) override;
  void gate(const GateParams& p) override { cuda::gate(p, stream_); }
  void add(const AddParams& p) override { cuda::add(p, stream_); }
  void cast(const CastParams& p) override { cuda::cast(p, stream_); }

  // Codecs (codec_ops.h)
  void conv1d(const Conv1dParams& p) override { cuda::conv1d(p, stream_); }
  void conv_transpose1d(const ConvTranspose1dParams& p) override { cuda::conv_transpose1d(p, stream_); }
  void snake_beta(const SnakeBetaParams& p) override { cuda::snake_beta(p, stream_); }
  void conv3d(const Conv3dParams& p) override {
    if (!(conv_cudnn_ && conv_->conv3d(p, stream_))) cuda::conv3d(p, stream_);
  }
  /// conv3d on cuDNN whatever MAGI2_CONV_KERNEL says (cuda_conv3d_cudnn).
  bool conv3d_cudnn(const Conv3dParams& p) { return conv_->conv3d(p, stream_); }
  /// conv3d on our kernel whatever MAGI2_CONV_KERNEL says (cuda_conv3d_own).
  void conv3d_own(const Conv3dParams& p) { cuda::conv3d(p, stream_); }
  void activation(const ActivationParams& p) override { cuda::activation(p, stream_); }
  void upsample_nearest(const UpsampleNearestParams& p) override { cuda::upsample_nearest(p, stream_); }
  void channels_to_time(const ChannelsToTimeParams& p) override { cuda::channels_to_time(p, stream_); }
  void unpatchify(const UnpatchifyParams& p) override { cuda::unpatchify(p, stream_); }
  void latent_denorm(const LatentDenormParams& p) override { cuda::latent_denorm(p, stream_); }
  void frames_to_u8(const FramesToU8Params& p) override { cuda::frames_to_u8(p, stream_); }
  void channel_l2_norm(const ChannelL2NormParams& p) override { cuda::channel_l2_norm(p, stream_); }
  void avg_down3d(const AvgDown3dParams& p) override { cuda::avg_down3d(p, stream_); }
  void spatial_attention(const SpatialAttentionParams& p) override { cuda::spatial_attention(p, stream_); }
  void channel_affine(const ChannelAffineParams& p) override { cuda::channel_affine(p, stream_); }

  // Qwen3.5 text encoder (text_ops.h)
  void causal_conv1d(const CausalConv1dParams& p) override { cuda::causal_conv1d(p, stream_); }
  void gated_delta_rule(const GatedDeltaRuleParams& p) override { cuda::gated_delta_rule(p, stream_); }
  void gated_rms_norm(const GatedRmsNormParams& p) override { cuda::gated_rms_norm(p, stream_); }
  void rotary(const RotaryParams& p) override { cuda::rotary(p, stream_); }
  void causal_attention(const CausalAttentionParams& p) override {
    cuda::causal_attention(p, stream_, attention_kernel_ == cuda::AttentionKernel::kFp32);
  }
  void sigmoid_mul(const SigmoidMulParams& p) override { cuda::sigmoid_mul(p, stream_); }
  void silu_mul(const SiluMulParams& p) override { cuda::silu_mul(p, stream_); }

  // Sampler (sampler_ops.h)
  void copy_elems(const CopyElemsParams& p) override { cuda::copy_elems(p, stream_); }
  void fill_rows(const FillRowsParams& p) override { cuda::fill_rows(p, stream_); }
  void cfg_combine(const CfgCombineParams& p) override { cuda::cfg_combine(p, stream_); }
  void flow_unipc_step(const FlowUniPCStepParams& p) override { cuda::flow_unipc_step(p, stream_); }
  void advance_step(const AdvanceStepParams& p) override { cuda::advance_step(p, stream_); }
  void nonfinite_check(const NonfiniteCheckParams& p) override { cuda::nonfinite_check(p, stream_); }

  // Attention path (attn_ops.h): row gathers, RoPE, attention with sinks.
  void gather_rows(const GatherRowsParams& p) override { cuda::gather_rows(p, stream_); }
  void copy_cols(const CopyColsParams& p) override { cuda::copy_cols(p, stream_); }
  void rope_table(const RopeTableParams& p) override { cuda::rope_table(p, stream_); }
  void rope(const RopeParams& p) override { cuda::rope(p, stream_); }
  void attention(const AttentionParams& p) override { cuda::attention(p, stream_, attention_kernel_); }
  void attn_qkv(const AttnQkvParams& p) override { cuda::attn_qkv(p, stream_); }
  void block_sparse_attention(const BlockSparseAttentionParams& p) override {
    cuda::block_sparse_attention(p, stream_);
  }
  void attn_out(const AttnOutParams& p) override { cuda::attn_out(p, stream_); }

 private:
  bool capturing() const { return stream_capturing(stream_); }

  int device_;
  cuda::AttentionKernel attention_kernel_ = cuda::AttentionKernel::kAuto;  ///< CudaOptions::attention
  bool profiling_ = false;
  std::vector<std::pair<std::string, cudaEvent_t>> marks_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<DeviceCache> cache_;
  std::shared_ptr<void> workspace_;
  std::unique_ptr<LinearRunner> linear_;
  std::unique_ptr<MoeExpertsRunner> moe_;
  std::unique_ptr<SplitScratch> scratch_;
  std::unique_ptr<ConvRunner> conv_;  // conv3d on cuDNN (conv_runner.h)
  bool conv_cudnn_ = false;           // MAGI2_CONV_KERNEL=cudnn
  FusedPaths fused_;  // MAGI2_MHC_KERNEL / MAGI2_ROUTER_KERNEL (fused_kernels.h)
  bool swiglu7_fast_ = true;  // MAGI2_SWIGLU7_KERNEL=fused: the SFU sigmoid (cuda_common.h swiglu7)
};

// One captured step: an instantiated CUDA graph launched on the backend's stream.
class CudaStepGraph final : public StepGraph {
 public:
  CudaStepGraph(cudaGraphExec_t exec, cudaStream_t s) : exec_(exec), s_(s) {}
  ~CudaStepGraph() override { cudaGraphExecDestroy(exec_); }
  void launch() override { MAGI2_CUDA_CHECK(cudaGraphLaunch(exec_, s_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t s_;
};

void CudaBackend::moe_prepare_banks(MoeExpertsParams& p) {
  // Only FP8 banks with W8A8 compute at the fused FP8 kernel's widths have a faster layout; anything else
  // (and bad shapes, which moe_experts names) stays as it is.
  if (p.bank_layout != ExpertBankLayout::Checkpoint || p.fp8_compute != Fp8Compute::W8A8) return;
  const Tensor &g = p.w_gate, &u = p.w_up, &d = p.w_down;
  for (const Tensor* t : {&g, &u, &d})
    if (!t->defined() || t->dtype() != DType::F8E4M3 || t->dim() != 3 || t->device() != Device::CUDA ||
        !t->is_contiguous())
      return;
  const int64_t nf = g.size(0), dh = g.size(1), de = g.size(2);
  if (u.shape() != g.shape() || d.shape() != Shape{nf, de, dh} || !cuda::MoeW8a8::supports(dh, de)) return;
  Tensor gt = alloc({nf, de, dh}, DType::F8E4M3), ut = alloc({nf, de, dh}, DType::F8E4M3),
         dt = alloc({nf, dh, de}, DType::F8E4M3);
  cuda::w8a8_banks_to_k_major(p, static_cast<uint8_t*>(gt.data()), static_cast<uint8_t*>(ut.data()),
                              static_cast<uint8_t*>(dt.data()), stream_);
  // The old banks may be freed (and their blocks reused) as soon as the caller drops them.
  MAGI2_CUDA_CHECK(cudaStreamSynchronize(stream_));
  p.w_gate = gt, p.w_up = ut, p.w_down = dt;
  p.bank_layout = ExpertBankLayout::KMajorW8a8;
}

std::unique_ptr<StepGraph> CudaBackend::capture(std::function<void()> body) {
  MAGI2_CHECK(static_cast<bool>(body), "capture: empty step body");
  // Global mode: any CUDA call that is unsafe during capture anywhere in the
  // process (a sync, cudaMalloc, a pageable copy) fails, which is the proof
  // that a step has no host synchronisation.
  MAGI2_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal));
  try {
    body();
  } catch (...) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw;
  }
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream_, &g);
  if (e != cudaSuccess) {
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw Error(str_cat("CUDA backend: capturing the step failed (", cudaGetErrorString(e),
                        "): the step did a host sync, an allocation or a pageable host copy"));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  MAGI2_CHECK(ie == cudaSuccess, "CUDA backend: instantiating the step graph failed: ", cudaGetErrorString(ie));
  return std::make_unique<CudaStepGraph>(exec, stream_);
}

CudaBackend& as_cuda(Backend& b) {
  auto* c = dynamic_cast<CudaBackend*>(&b);
  MAGI2_CHECK(c != nullptr, "expected the CUDA backend, got the ", b.name(), " backend");
  return *c;
}

}  // namespace
}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(int device, const CudaOptions& options) {
  return std::make_unique<cuda::CudaBackend>(device, options);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::shared_ptr<void> cuda_hold_all_but(size_t budget) {
  size_t f = 0, t = 0;
  MAGI2_CUDA_CHECK(cudaMemGetInfo(&f, &t));
  if (f <= budget) return {};
  void* p = nullptr;
  MAGI2_CUDA_CHECK(cudaMalloc(&p, f - budget));
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

bool cuda_memory_info(int device, size_t* free_bytes, size_t* total_bytes) {
  if (device < 0 || device >= cuda_device_count()) return false;
  int prev = 0;
  if (cudaGetDevice(&prev) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  size_t f = 0, t = 0;
  const bool ok = cudaMemGetInfo(&f, &t) == cudaSuccess;
  if (!ok) cudaGetLastError();
  cudaSetDevice(prev);
  if (ok) *free_bytes = f, *total_bytes = t;
  return ok;
}

void* cuda_stream_of(Backend& b) { return cuda::as_cuda(b).stream(); }

std::unique_ptr<CopyQueue> cuda_copy_queue(Backend& b, int fences) {
  cuda::CudaBackend& c = cuda::as_cuda(b);
  return cuda::make_copy_queue(c.ordinal(), c.stream(), fences);
}

void cuda_profile_begin(Backend& b) { cuda::as_cuda(b).profile_begin(); }

std::map<std::string, double> cuda_profile_end(Backend& b) { return cuda::as_cuda(b).profile_end(); }

void cuda_synchronize(Backend& b) { MAGI2_CUDA_CHECK(cudaStreamSynchronize(cuda::as_cuda(b).stream())); }

bool cuda_conv3d_cudnn(Backend& b, const Conv3dParams& p) { return cuda::as_cuda(b).conv3d_cudnn(p); }
void cuda_conv3d_own(Backend& b, const Conv3dParams& p) { cuda::as_cuda(b).conv3d_own(p); }

void cuda_fill_random(Backend& b, const Tensor& t, uint64_t seed, float stddev) {
  cuda::fill_random(t, seed, stddev, cuda::as_cuda(b).stream());
}

void cuda_reset_memory_peak(Backend& b) { cuda::as_cuda(b).cache().reset_peak(); }

CudaMemoryStats cuda_memory_stats(Backend& b) {
  const cuda::CudaBackend& c = cuda::as_cuda(b);
  CudaMemoryStats m;
  m.in_use = c.cache().bytes_in_use();
  m.peak_in_use = c.cache().bytes_peak();
  m.cached = c.cache().bytes_cached();
  size_t free = 0, total = 0;
  MAGI2_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  m.device_used = total - free;
  m.device_total = total;
  return m;
}

}  // namespace magi2
