// Read-only memory mapping of a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
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

/// Where some bytes of a live mapping come from: the file and the offset of
/// the first byte in it.
struct FileSpan {
  std::string path;
  uint64_t offset = 0;
};

/// Whether [p, p + bytes) lies inside one live MappedFile; then *out says
/// which file and where (loaders read it with pread instead of faulting the
/// mapping in page by page). Thread-safe.
bool find_mapped_span(const void* p, size_t bytes, FileSpan* out);

/// Reads exactly `bytes` at `offset` of the open file `fd` into `dst` (pread,
/// retried on short reads and EINTR). Error naming `path` on a read error or
/// an early end of file.
void pread_exact(int fd, const std::string& path, uint64_t offset, void* dst, size_t bytes);

/// Largest file read_text_file accepts by default (tokenizer.json is ~12 MB).
constexpr size_t kMaxTextFileBytes = size_t{256} << 20;

/// Why `path` cannot be read as a file, as a phrase for an error message
/// ("does not exist", "is a folder", "is a character device, not a file", the
/// errno text), or "" when it is a regular file or a pipe we may read.
std::string file_problem(const std::string& path);

/// Why `path` is not a folder, as a phrase for an error message ("does not
/// exist", "is a file, not a folder", "is a character device, not a folder",
/// the errno text), or "" when it is a folder (symlinks followed).
std::string folder_problem(const std::string& path);

/// Reads a whole (small) file into a string. Errors (naming the path): it is
/// missing, a folder or a device (so /dev/zero is refused up front, not read
/// forever), unreadable, or longer than `max_bytes` (pipes included).
std::string read_text_file(const std::string& path, size_t max_bytes = kMaxTextFileBytes);

/// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename.
/// Nothing is ever left half-written under `path`, and the temporary file is
/// removed on errors and on SIGINT/SIGTERM (io/temp_files.h).
void write_file_atomic(const std::string& path, const std::string& bytes);

/// A file written in pieces, atomically: bytes go to PATH.tmp.<pid> (removed on
/// SIGINT/SIGTERM, on errors and when the writer is destroyed uncommitted) and
/// commit() renames it to PATH. For outputs too large to hold in one string
/// (a release-width checkpoint shard is gigabytes). Errors (Error naming PATH):
/// the temporary file cannot be created or written, the rename fails.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  /// Appends `bytes` bytes from `data`.
  void write(const void* data, size_t bytes);
  /// Closes the file (after fsync when `sync`) and renames it to the target.
  /// `sync` = false for a file inside a folder that is itself renamed into
  /// place when complete (the folder's rename is the atomic step; an fsync
  /// per multi-GB file would make the writer disk-bound).
  void commit(bool sync = true);

 private:
  std::string path_, tmp_;
  std::unique_ptr<class TempFileGuard> guard_;
  int fd_ = -1;
};

}  // namespace magi2
