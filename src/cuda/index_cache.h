// Device copies of the host index vectors some ops take (gather_rows' index,
// rope's src_rows, attention's cu_seqlens). Host-side only (plain C++).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "cuda/allocator.h"

namespace magi2::cuda {

/// Uploads each distinct index vector once and hands back the device copy on
/// later calls with the same contents. The DiT's index vectors are fixed per
/// shape (the planner builds them once), so after the first step no op
/// allocates or copies for its indices, and a step captures into a CUDA graph
/// (the first call of a new vector must happen outside capture: it allocates).
/// Lookup costs a hash and a compare over the vector on the host. Entries
/// live until the cache holds kMaxEntries of them; then it is cleared, which
/// is safe because freed device blocks are only reused by work on the same
/// stream (docs/cuda.md, Memory).
class IndexCache {
 public:
  explicit IndexCache(std::shared_ptr<DeviceCache> cache) : cache_(std::move(cache)) {}

  /// Device pointer to a copy of `v` (n int32 values), uploaded on `s` on first use.
  const int32_t* get(const std::vector<int32_t>& v, cudaStream_t s);

 private:
  static constexpr size_t kMaxEntries = 64;
  struct Entry {
    std::vector<int32_t> host;  // the uploaded contents; also the source of the async upload
    std::shared_ptr<void> dev;
  };
  std::shared_ptr<DeviceCache> cache_;
  std::unordered_multimap<uint64_t, Entry> entries_;
};

}  // namespace magi2::cuda
