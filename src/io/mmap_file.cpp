#include "io/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "io/temp_files.h"

namespace magi2 {

namespace {

// Live mappings by start address, for find_mapped_span.
struct MappingRegistry {
  std::mutex mu;
  std::map<uintptr_t, std::pair<size_t, std::string>> by_start;  // start -> (size, path)
};

MappingRegistry& registry() {
  static MappingRegistry r;
  return r;
}

}  // namespace

bool find_mapped_span(const void* p, size_t bytes, FileSpan* out) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  MappingRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_start.upper_bound(a);
  if (it == r.by_start.begin()) return false;
  --it;
  const auto& [size, path] = it->second;
  if (a + bytes > it->first + size) return false;
  out->path = path;
  out->offset = a - it->first;
  return true;
}

void pread_exact(int fd, const std::string& path, uint64_t offset, void* dst, size_t bytes) {
  auto* d = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, d, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(str_cat("cannot read '", path, "' at byte ", offset, ": ",
                                    n < 0 ? std::strerror(errno) : "unexpected end of file"));
    d += n, offset += static_cast<uint64_t>(n), bytes -= static_cast<size_t>(n);
  }
}

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  {
    // Checked before open(): opening a FIFO would block.
    struct stat pre {};
    if (::stat(path.c_str(), &pre) == 0 && !S_ISREG(pre.st_mode)) {
      const std::string why = file_problem(path);
      throw Error(str_cat("cannot map '", path, "': ", why.empty() ? "is a pipe, not a regular file" : why));
    }
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(str_cat("cannot open '", path, "': ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw Error(str_cat("cannot stat '", path, "': ", std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(str_cat("cannot map '", path, "': is not a regular file"));
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw Error(str_cat("cannot mmap '", path, "': ", std::strerror(e)));
    }
    f->data_ = static_cast<const unsigned char*>(p);
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().by_start[reinterpret_cast<uintptr_t>(p)] = {f->size_, path};
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (!data_) return;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().by_start.erase(reinterpret_cast<uintptr_t>(data_));
  }
  ::munmap(const_cast<unsigned char*>(data_), size_);
}

std::string file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno == ENOENT ? "does not exist" : std::strerror(errno);
  if (S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "is a folder, not a file";
  if (S_ISCHR(st.st_mode)) return "is a character device, not a file";
  if (S_ISBLK(st.st_mode)) return "is a block device, not a file";
  return "is not a regular file";
}

std::string folder_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno == ENOENT ? "does not exist" : std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return "";
  if (S_ISREG(st.st_mode)) return "is a file, not a folder";
  if (S_ISCHR(st.st_mode)) return "is a character device, not a folder";
  if (S_ISBLK(st.st_mode)) return "is a block device, not a folder";
  if (S_ISFIFO(st.st_mode)) return "is a pipe, not a folder";
  return "is not a folder";
}

std::string read_text_file(const std::string& path, size_t max_bytes) {
  const std::string problem = file_problem(path);
  if (!problem.empty()) throw Error(str_cat("cannot open '", path, "': ", problem));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(str_cat("cannot open '", path, "': ", std::strerror(errno)));
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int e = errno;
      ::close(fd);
      throw Error(str_cat("cannot read '", path, "': ", std::strerror(e)));
    }
    if (r == 0) break;
    if (out.size() + static_cast<size_t>(r) > max_bytes) {
      ::close(fd);
      throw Error(str_cat("cannot read '", path, "': longer than ", max_bytes, " bytes"));
    }
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFileWriter w(path);
  w.write(bytes.data(), bytes.size());
  w.commit(true);
}

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  guard_ = std::make_unique<TempFileGuard>(tmp_);  // a SIGINT/SIGTERM before the rename removes it
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(str_cat("cannot write '", path_, "': ", std::strerror(errno)));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ < 0) return;  // committed
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  MAGI2_CHECK(fd_ >= 0, "cannot write '", path_, "': already committed");
  const char* p = static_cast<const char*>(data);
  size_t off = 0;
  while (off < bytes) {
    const ssize_t w = ::write(fd_, p + off, bytes - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(str_cat("cannot write '", path_, "': ", std::strerror(errno)));
    }
    off += static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit(bool sync) {
  MAGI2_CHECK(fd_ >= 0, "cannot write '", path_, "': already committed");
  const int fd = fd_;
  fd_ = -1;
  int e = (sync && ::fsync(fd) != 0) ? errno : 0;
  if (::close(fd) != 0 && e == 0) e = errno;
  if (e != 0) {
    ::unlink(tmp_.c_str());
    throw Error(str_cat("cannot write '", path_, "': ", std::strerror(e)));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    throw Error(str_cat("cannot rename '", tmp_, "' to '", path_, "': ", std::strerror(e)));
  }
}

}  // namespace magi2
