// safetensors reading (mmap, strict header validation) and writing (atomic).
// Format: u64 little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}},
// then the data section; offsets are relative to the data section.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/mmap_file.h"

namespace magi2 {

/// Largest JSON header accepted (the upstream safetensors limit is 100 MB).
constexpr size_t kSafetensorsMaxHeader = 100u << 20;

/// One tensor entry of a safetensors header.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  size_t begin = 0;  ///< byte offset from the data section start
  size_t end = 0;    ///< one past the last byte
};

/// An open, validated safetensors file. Tensors are zero-copy views over the
/// mapping. Errors (Error) name the file and, where it applies, the tensor:
/// truncated file, header size beyond the file or the limit, bad JSON, unknown
/// dtype, negative/overflowing shape, byte size != dtype x shape, offsets
/// outside the file, overlapping tensors, a tensor name given twice, JSON
/// nested deeper than kMaxJsonDepth.
class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  /// Entry by name; Error naming file and tensor if absent.
  const SafetensorsEntry& entry(const std::string& name) const;
  /// Zero-copy CPU view of a tensor (keeps the mapping alive).
  Tensor tensor(const std::string& name) const;

 private:
  std::shared_ptr<MappedFile> file_;
  size_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

/// Writes tensors (contiguous CPU) to `path` atomically, in the given order.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// One tensor of a streamed safetensors file: what the header says.
struct SafetensorsSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
};

/// Writes a safetensors file of `specs` (in order) without holding it in
/// memory: the header first (byte-identical to write_safetensors for the same
/// tensors), then `make(i)` for each spec i in turn, written and dropped
/// before the next is made (peak memory: one tensor). `make` must return a
/// contiguous CPU tensor of spec i's shape and dtype. Atomic
/// (AtomicFileWriter; `sync` as its commit). Errors: a duplicate name, a made
/// tensor of the wrong shape or dtype (naming it), write failures (naming the path).
void write_safetensors_streamed(const std::string& path, const std::vector<SafetensorsSpec>& specs,
                                const std::function<Tensor(size_t)>& make,
                                const std::map<std::string, std::string>& metadata = {}, bool sync = true);

}  // namespace magi2
