// Caching device allocator (see allocator.h).
#include "cuda/allocator.h"

#include <algorithm>

#include "cuda/cuda_common.h"

namespace magi2::cuda {

namespace {

// Small blocks round to 512 bytes, large ones to 2 MiB, so blocks of nearby
// sizes share a bucket and the cache stays small.
size_t round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t{2} << 20;
  if (bytes == 0) bytes = 1;
  const size_t unit = bytes < (size_t{1} << 20) ? kSmall : kLarge;
  return (bytes + unit - 1) / unit * unit;
}

}  // namespace

DeviceCache::~DeviceCache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached();
}

void DeviceCache::release_cached() {
  int prev = 0;
  cudaGetDevice(&prev);
  cudaSetDevice(device_);
  for (auto& [size, p] : free_) cudaFree(p);  // destructor path: errors cannot be reported
  free_.clear();
  cached_ = 0;
  cudaSetDevice(prev);
}

std::shared_ptr<void> DeviceCache::get(size_t bytes) {
  const size_t size = round_size(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end()) {
      p = it->second;
      free_.erase(it);
      cached_ -= size;
    } else {
      MAGI2_CUDA_CHECK(cudaSetDevice(device_));
      if (cudaMalloc(&p, size) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky-free out-of-memory error, then retry on an empty cache
        release_cached();
        const cudaError_t e = cudaMalloc(&p, size);
        MAGI2_CHECK(e == cudaSuccess, "CUDA backend: cannot allocate ", size, " bytes on GPU ", device_, " (",
                    in_use_, " bytes in use): ", cudaGetErrorString(e));
      }
    }
    in_use_ += size;
    peak_ = std::max(peak_, in_use_);
  }
  std::shared_ptr<DeviceCache> self = shared_from_this();
  return std::shared_ptr<void>(p, [self, size](void* q) { self->put(q, size); });
}

void DeviceCache::put(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.emplace(bytes, p);
  in_use_ -= bytes;
  cached_ += bytes;
}

size_t DeviceCache::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

size_t DeviceCache::bytes_peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

void DeviceCache::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = in_use_;
}

size_t DeviceCache::bytes_cached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

}  // namespace magi2::cuda
