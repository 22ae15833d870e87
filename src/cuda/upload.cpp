#include "cuda/upload.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>

#include "cuda/cuda_common.h"
#include "io/span_reader.h"

namespace magi2::cuda {

namespace {

constexpr size_t kChunk = size_t{32} << 20;

// One worker: its own stream and two pinned buffers used alternately; an event
// per buffer says when its previous async copy has drained.
void upload_worker(const std::vector<HostUpload>& mine, int device, std::atomic<size_t>& done_bytes) {
  MAGI2_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t s = nullptr;
  MAGI2_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* buf[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
  auto cleanup = [&] {
    cudaStreamSynchronize(s);
    for (int i = 0; i < 2; ++i) {
      if (buf[i]) cudaFreeHost(buf[i]);
      if (done[i]) cudaEventDestroy(done[i]);
    }
    cudaStreamDestroy(s);
  };
  try {
    for (int i = 0; i < 2; ++i) {
      MAGI2_CUDA_CHECK(cudaHostAlloc(&buf[i], kChunk, cudaHostAllocDefault));
      MAGI2_CUDA_CHECK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
    }
    int next = 0;
    SpanReader reader;
    for (const HostUpload& u : mine)
      for (size_t off = 0; off < u.bytes; off += kChunk) {
        const size_t n = std::min(kChunk, u.bytes - off);
        MAGI2_CUDA_CHECK(cudaEventSynchronize(done[next]));
        reader.read(static_cast<const char*>(u.src) + off, buf[next], n, "weights to upload");
        MAGI2_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(u.dst) + off, buf[next], n, cudaMemcpyHostToDevice, s));
        MAGI2_CUDA_CHECK(cudaEventRecord(done[next], s));
        done_bytes += n;  // read and enqueued (the final stream sync waits for the last copies)
        next ^= 1;
      }
    MAGI2_CUDA_CHECK(cudaStreamSynchronize(s));
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
}

}  // namespace

void upload_parallel(const std::vector<HostUpload>& ups, int device, const UploadProgress& progress) {
  if (ups.empty()) return;
  size_t total = 0;
  for (const HostUpload& u : ups) total += u.bytes;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t workers = std::min<size_t>({8, hw, std::max<size_t>(1, total / kChunk), ups.size()});
  // Largest first onto the least-loaded worker: balanced bytes per thread.
  std::vector<size_t> order(ups.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ups[a].bytes > ups[b].bytes; });
  std::vector<std::vector<HostUpload>> plan(workers);
  std::vector<size_t> load(workers, 0);
  for (size_t i : order) {
    const size_t w = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    plan[w].push_back(ups[i]);
    load[w] += ups[i].bytes;
  }
  std::exception_ptr err;
  std::mutex mu;
  std::atomic<size_t> done{0};
  std::atomic<size_t> running{workers};
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      try {
        upload_worker(plan[w], device, done);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!err) err = std::current_exception();
      }
      --running;
    });
  // Progress on the caller's thread, a few times a second.
  while (progress && running > 0) {
    progress(done.load(), total);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (std::thread& t : threads) t.join();
  if (progress && !err) progress(total, total);
  if (err) std::rethrow_exception(err);
}

}  // namespace magi2::cuda
