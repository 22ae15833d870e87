// Device copies of host index vectors (see index_cache.h).
#include "cuda/index_cache.h"

#include <algorithm>

#include "cuda/cuda_common.h"

namespace magi2::cuda {

namespace {

// FNV-1a over the bytes: only picks the bucket, the contents are compared in full.
uint64_t hash_of(const std::vector<int32_t>& v) {
  uint64_t h = 1469598103934665603ull ^ v.size();
  for (int32_t x : v) {
    h ^= static_cast<uint32_t>(x);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

const int32_t* IndexCache::get(const std::vector<int32_t>& v, cudaStream_t s) {
  const uint64_t h = hash_of(v);
  auto [lo, hi] = entries_.equal_range(h);
  for (auto it = lo; it != hi; ++it)
    if (it->second.host == v) return static_cast<const int32_t*>(it->second.dev.get());
  if (entries_.size() >= kMaxEntries) entries_.clear();
  Entry e{v, cache_->get(std::max<size_t>(v.size(), 1) * sizeof(int32_t))};
  // A pageable source is staged by the driver before the call returns, so the
  // entry's host vector may go away with the cache later without a wait.
  if (!v.empty())
    MAGI2_CUDA_CHECK(
        cudaMemcpyAsync(e.dev.get(), e.host.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  const int32_t* d = static_cast<const int32_t*>(e.dev.get());
  entries_.emplace(h, std::move(e));
  return d;
}

}  // namespace magi2::cuda
