// Device memory for the CUDA backend: a caching allocator behind Backend::alloc.
// Internal to src/cuda/.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

namespace magi2::cuda {

/// Hands out cudaMalloc'd blocks and keeps freed blocks for reuse (keyed by
/// their rounded size), so a workspace planned once per shape costs no
/// cudaMalloc after the first denoising step. All work runs on the backend's
/// one stream, so a block freed by the host and handed out again is only
/// touched by later ops in stream order. Blocks are returned to the driver
/// when the cache is destroyed (after the last tensor using it) or when a
/// cudaMalloc fails (then the allocation is retried once).
class DeviceCache : public std::enable_shared_from_this<DeviceCache> {
 public:
  explicit DeviceCache(int device) : device_(device) {}
  ~DeviceCache();
  DeviceCache(const DeviceCache&) = delete;
  DeviceCache& operator=(const DeviceCache&) = delete;

  /// A block of at least `bytes` (256-byte aligned) whose lifetime is the
  /// returned owner's: when the last copy drops, the block goes back to the cache.
  /// Error naming the size when the device is out of memory.
  std::shared_ptr<void> get(size_t bytes);

  size_t bytes_in_use() const;
  size_t bytes_cached() const;
  size_t bytes_peak() const;  ///< the largest bytes_in_use() so far (since the last reset_peak)
  /// Starts a new peak at bytes_in_use(): a bench reads the peak of one phase.
  void reset_peak();

 private:
  void put(void* p, size_t bytes);
  void release_cached();  // caller holds mu_

  int device_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  // rounded size -> block
  size_t in_use_ = 0;
  size_t peak_ = 0;
  size_t cached_ = 0;
};

}  // namespace magi2::cuda
