// Read-only memory mapping of a whole file.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace magi2 {

/// A read-only mmap of one file. Throws Error naming the path when it cannot
/// be opened or mapped. Share it (shared_ptr) to keep views alive.
class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

/// Reads a whole (small) file into a string; Error naming the path on failure.
std::string read_text_file(const std::string& path);

/// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename.
/// Nothing is ever left half-written under `path`.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace magi2
