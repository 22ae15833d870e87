// A synchronous CopyQueue for CPU tests of `--offload layerwise`
// (ops/layer_offload.h): copies at once and logs every call, so a test can
// check the streamed forward's bytes and the copy schedule without a GPU.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/copy_queue.h"

namespace magi2::test {

/// Log entries: "w" (wait_compute), "c" (copy), "s<f>" (signal), "cw<f>" (compute_wait).
class MemcpyQueue final : public CopyQueue {
 public:
  std::vector<std::string> log;
  size_t bytes = 0;
  Tensor alloc_host(const Shape& shape, DType dtype) override { return Tensor::zeros(shape, dtype); }
  void wait_compute() override { log.push_back("w"); }
  void copy(void* dst, const void* src, size_t n) override {
    std::memcpy(dst, src, n);
    bytes += n;
    log.push_back("c");
  }
  void signal(int f) override { log.push_back(str_cat("s", f)); }
  void compute_wait(int f) override { log.push_back(str_cat("cw", f)); }
  CopyQueueStats stats() override { return {.bytes = bytes, .ms = 0, .copies = log.size()}; }
};

}  // namespace magi2::test
