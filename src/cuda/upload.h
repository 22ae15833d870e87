// Host-to-device upload of many buffers at once (weights at load): the bytes go
// through pinned staging buffers, several threads in parallel, so reading the
// mmap'd checkpoint (page faults, page-cache copies) overlaps the PCIe transfers.
// Host-side only (plain C++).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace magi2::cuda {

/// One contiguous host -> device copy.
struct HostUpload {
  const void* src = nullptr;  ///< host bytes (pageable, e.g. an mmap'd shard)
  void* dst = nullptr;        ///< device bytes
  size_t bytes = 0;
};

/// Bytes uploaded so far and in all (called on the caller's thread).
using UploadProgress = std::function<void(size_t done, size_t total)>;

/// Runs every upload and returns when all have landed on GPU `device`. Work is
/// split over up to 8 threads (greedy by size, so the shards are read in
/// parallel), each filling two pinned 32 MiB buffers in turn and issuing async
/// copies on its own stream. A source inside an mmap'd file (a checkpoint
/// tensor) is read with pread from that file (large reads from the page cache
/// instead of page faults on the mapping); other sources are copied.
/// `progress` (optional) is called every ~100 ms and at the end.
/// Errors: Error naming the CUDA call or the file that failed.
void upload_parallel(const std::vector<HostUpload>& ups, int device, const UploadProgress& progress = {});

}  // namespace magi2::cuda
