#include "cuda/copy_queue.h"

#include <vector>

#include "cuda/cuda_common.h"

namespace magi2::cuda {

namespace {

// Timing pairs kept before stats() collects them: enough for the eager steps
// of a run (a few forwards of up to ~100 layers); later copies go untimed
// rather than growing without bound when every step runs eagerly.
constexpr size_t kMaxTimed = 1024;

class CudaCopyQueue final : public CopyQueue {
 public:
  CudaCopyQueue(int device, cudaStream_t compute, int fences) : compute_(compute) {
    MAGI2_CHECK(fences >= 1, "copy queue: needs at least one fence, got ", fences);
    MAGI2_CUDA_CHECK(cudaSetDevice(device));
    MAGI2_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    MAGI2_CUDA_CHECK(cudaEventCreateWithFlags(&from_compute_, cudaEventDisableTiming));
    fences_.resize(static_cast<size_t>(fences), nullptr);
    for (cudaEvent_t& e : fences_) MAGI2_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  ~CudaCopyQueue() override {
    if (copy_) cudaStreamSynchronize(copy_);
    for (Timed& t : timed_) cudaEventDestroy(t.start), cudaEventDestroy(t.end);
    for (cudaEvent_t e : fences_)
      if (e) cudaEventDestroy(e);
    if (from_compute_) cudaEventDestroy(from_compute_);
    if (copy_) cudaStreamDestroy(copy_);
  }

  Tensor alloc_host(const Shape& shape, DType dtype) override {
    int64_t n = 1;
    for (int64_t d : shape) {
      MAGI2_CHECK(d >= 0, "copy queue: alloc_host: negative dimension in ", shape_str(shape));
      n *= d;
    }
    const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes > 0 ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw Error(str_cat("cannot pin ", bytes, " bytes of host memory for the streamed weights (cudaHostAlloc: ",
                          cudaGetErrorString(e), ")"));
    }
    std::shared_ptr<void> owner(p, [](void* q) { cudaFreeHost(q); });
    return Tensor::view_of(p, shape, dtype, std::move(owner), Device::CPU);
  }

  void wait_compute() override {
    MAGI2_CUDA_CHECK(cudaEventRecord(from_compute_, compute_));
    MAGI2_CUDA_CHECK(cudaStreamWaitEvent(copy_, from_compute_, 0));
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    const bool timed = !capturing() && timed_.size() < kMaxTimed;
    Timed t{};
    if (timed) {
      MAGI2_CUDA_CHECK(cudaEventCreate(&t.start));
      MAGI2_CUDA_CHECK(cudaEventCreate(&t.end));
      t.bytes = bytes;
      MAGI2_CUDA_CHECK(cudaEventRecord(t.start, copy_));
    }
    MAGI2_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copy_));
    if (timed) {
      MAGI2_CUDA_CHECK(cudaEventRecord(t.end, copy_));
      timed_.push_back(t);
    }
  }

  void signal(int f) override { MAGI2_CUDA_CHECK(cudaEventRecord(fence(f), copy_)); }
  void compute_wait(int f) override { MAGI2_CUDA_CHECK(cudaStreamWaitEvent(compute_, fence(f), 0)); }

  CopyQueueStats stats() override {
    for (Timed& t : timed_) {
      MAGI2_CUDA_CHECK(cudaEventSynchronize(t.end));
      float ms = 0;
      MAGI2_CUDA_CHECK(cudaEventElapsedTime(&ms, t.start, t.end));
      done_.bytes += t.bytes;
      done_.ms += ms;
      ++done_.copies;
      cudaEventDestroy(t.start), cudaEventDestroy(t.end);
    }
    timed_.clear();
    return done_;
  }

 private:
  struct Timed {
    cudaEvent_t start = nullptr, end = nullptr;
    size_t bytes = 0;
  };

  cudaEvent_t fence(int f) const {
    MAGI2_CHECK(f >= 0 && static_cast<size_t>(f) < fences_.size(), "copy queue: fence ", f, " of ",
                fences_.size());
    return fences_[static_cast<size_t>(f)];
  }
  bool capturing() const { return stream_capturing(compute_); }

  cudaStream_t compute_ = nullptr, copy_ = nullptr;
  cudaEvent_t from_compute_ = nullptr;
  std::vector<cudaEvent_t> fences_;
  std::vector<Timed> timed_;
  CopyQueueStats done_;
};

}  // namespace

std::unique_ptr<CopyQueue> make_copy_queue(int device, void* compute, int fences) {
  return std::make_unique<CudaCopyQueue>(device, static_cast<cudaStream_t>(compute), fences);
}

}  // namespace magi2::cuda
