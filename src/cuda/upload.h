// Host-to-device upload of many buffers at once (weights at load): the bytes go
// through pinned staging buffers, several threads in parallel, so reading the
// mmap'd checkpoint (page faults, page-cache copies) overlaps the PCIe transfers.
// Host-side only (plain C++).
#pragma once

#include <cstddef>
#include <vector>

namespace magi2::cuda {

/// One contiguous host -> device copy.
struct HostUpload {
  const void* src = nullptr;  ///< host bytes (pageable, e.g. an mmap'd shard)
  void* dst = nullptr;        ///< device bytes
  size_t bytes = 0;
};

/// Runs every upload and returns when all have landed on GPU `device`. Work is
/// split over up to 8 threads (greedy by size), each copying 32 MiB chunks into
/// two pinned buffers in turn and issuing async copies on its own stream.
/// Errors: Error naming the CUDA call that failed.
void upload_parallel(const std::vector<HostUpload>& ups, int device);

}  // namespace magi2::cuda
