#include "io/span_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/mmap_file.h"

namespace magi2 {

SpanReader::~SpanReader() {
  for (auto& [path, fd] : fds_) ::close(fd);
}

void SpanReader::read(const void* src, void* dst, size_t n, const char* what) {
  FileSpan span;
  if (!find_mapped_span(src, n, &span)) {
    std::memcpy(dst, src, n);
    return;
  }
  auto it = fds_.find(span.path);
  if (it == fds_.end()) {
    const int fd = ::open(span.path.c_str(), O_RDONLY | O_CLOEXEC);
    MAGI2_CHECK(fd >= 0, "cannot open '", span.path, "' to read its ", what, ": ", std::strerror(errno));
    it = fds_.emplace(span.path, fd).first;
  }
  pread_exact(it->second, span.path, span.offset, dst, n);
}

}  // namespace magi2
