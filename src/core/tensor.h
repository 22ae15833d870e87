// Tensor: a typed, strided view over bytes on one device. Either owning
// (allocated here) or a view that keeps its owner (an mmap'd checkpoint shard,
// a workspace arena, another tensor) alive through a shared_ptr.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace magi2 {

/// Where the bytes live. CUDA tensors are never dereferenced on the host.
enum class Device : uint8_t { CPU, CUDA };

using Shape = std::vector<int64_t>;

/// Formats a shape as "[a, b, c]".
std::string shape_str(const Shape& s);

/// A strided n-d view (strides in elements). Copying a Tensor copies the view,
/// not the data; the storage lives as long as any view of it.
class Tensor {
 public:
  Tensor() = default;

  /// New contiguous CPU tensor, zero-filled (64-byte aligned).
  static Tensor zeros(const Shape& shape, DType dtype);
  /// New contiguous CPU tensor, uninitialised.
  static Tensor empty(const Shape& shape, DType dtype);
  /// View over external bytes; `owner` keeps them alive (may be null for static data).
  static Tensor view_of(void* data, const Shape& shape, DType dtype,
                        std::shared_ptr<void> owner, Device device = Device::CPU);
  /// New CPU fp32 tensor with the given values (tests, small tables).
  static Tensor from_f32(const Shape& shape, const std::vector<float>& values);
  /// New CPU i32 tensor with the given values (index vectors, small tables).
  static Tensor from_i32(const Shape& shape, const std::vector<int32_t>& values);

  bool defined() const { return data_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  /// Size of dimension d (negative d counts from the end).
  int64_t size(int64_t d) const;
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* data() const { return data_; }
  /// Typed pointer; checks that T matches the dtype's element size.
  template <typename T>
  T* data_as() const {
    MAGI2_ASSERT(sizeof(T) == dtype_size(dtype_));
    return static_cast<T*>(data_);
  }

  /// Same bytes, new contiguous shape (requires a contiguous tensor and equal numel).
  Tensor reshape(const Shape& shape) const;
  /// Rows [begin, end) of dimension 0 (a view).
  Tensor slice_rows(int64_t begin, int64_t end) const;
  /// Columns [begin, end) of a 2-D tensor (a row-strided view).
  Tensor slice_cols(int64_t begin, int64_t end) const;
  /// Row stride in elements of a 2-D (or higher) tensor.
  int64_t row_stride() const { return strides_.empty() ? 1 : strides_[0]; }
  /// Deep copy into a new contiguous CPU tensor.
  Tensor clone() const;
  /// New contiguous CPU tensor converted to `dtype` (explicit RNE where narrowing).
  Tensor to(DType dtype) const;

  /// Element i of a contiguous CPU float tensor (F32/BF16/F16/F8E4M3) as fp32.
  float get_f32(int64_t i) const;

  const std::shared_ptr<void>& owner() const { return owner_; }

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
  Shape shape_;
  Shape strides_;
  std::shared_ptr<void> owner_;
};

/// Contiguous row-major strides for a shape.
Shape contiguous_strides(const Shape& shape);

/// Throws Error("<what>: expected shape X dtype D, got Y E") unless `t` matches.
void check_tensor(const Tensor& t, const Shape& shape, DType dtype, const std::string& what);

}  // namespace magi2
