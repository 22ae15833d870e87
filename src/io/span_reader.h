// Reads host bytes that may lie in an mmap'd checkpoint: a pread from the
// shard file instead of faulting the mapping page by page (large reads from
// the page cache), a memcpy otherwise. Used where weights are copied out in
// bulk (the device upload, the pinned image of `--offload layerwise`).
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace magi2 {

/// Keeps one read-only descriptor per shard it has read from (closed on
/// destruction). Not thread-safe: one reader per thread.
class SpanReader {
 public:
  SpanReader() = default;
  ~SpanReader();
  SpanReader(const SpanReader&) = delete;
  SpanReader& operator=(const SpanReader&) = delete;

  /// Copies the `n` bytes at `src` to `dst`: with pread from the file when
  /// [src, src + n) lies inside one live MappedFile (find_mapped_span), else
  /// with memcpy. `what` names the bytes in errors. Errors: Error naming the
  /// file that cannot be opened or read.
  void read(const void* src, void* dst, size_t n, const char* what);

 private:
  std::map<std::string, int> fds_;
};

}  // namespace magi2
