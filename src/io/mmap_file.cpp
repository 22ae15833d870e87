#include "io/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace magi2 {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
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
    throw Error(str_cat("'", path, "' is not a regular file"));
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
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str_cat("cannot open '", path, "': ", std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(str_cat("cannot read '", path, "'"));
  return ss.str();
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(str_cat("cannot write '", path, "': ", std::strerror(errno)));
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(str_cat("cannot write '", path, "': ", std::strerror(e)));
    }
    off += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw Error(str_cat("cannot write '", path, "': ", std::strerror(e)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw Error(str_cat("cannot rename '", tmp, "' to '", path, "': ", std::strerror(e)));
  }
}

}  // namespace magi2
