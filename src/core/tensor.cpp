#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace magi2 {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= shape[i];
  }
  return st;
}

static int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  for (auto d : shape) MAGI2_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  size_t alloc = ((bytes + 63) / 64) * 64;
  if (alloc == 0) alloc = 64;
  void* p = std::aligned_alloc(64, alloc);
  if (!p) throw Error(str_cat("out of memory allocating ", bytes, " bytes for a tensor of shape ",
                              shape_str(shape)));
  Tensor t;
  t.owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::view_of(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner,
                       Device device) {
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::from_f32(const Shape& shape, const std::vector<float>& values) {
  MAGI2_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()),
              "from_f32: ", values.size(), " values for shape ", shape_str(shape));
  Tensor t = empty(shape, DType::F32);
  std::memcpy(t.data_, values.data(), values.size() * 4);
  return t;
}

Tensor Tensor::from_i32(const Shape& shape, const std::vector<int32_t>& values) {
  MAGI2_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()),
              "from_i32: ", values.size(), " values for shape ", shape_str(shape));
  Tensor t = empty(shape, DType::I32);
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * 4);
  return t;
}

int64_t Tensor::size(int64_t d) const {
  if (d < 0) d += dim();
  MAGI2_CHECK(d >= 0 && d < dim(), "dimension ", d, " out of range for shape ", shape_str(shape_));
  return shape_[d];
}

int64_t Tensor::numel() const { return shape_numel(shape_); }

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

Tensor Tensor::reshape(const Shape& shape) const {
  MAGI2_CHECK(is_contiguous(), "reshape of a non-contiguous tensor");
  MAGI2_CHECK(shape_numel(shape) == numel(), "cannot reshape ", shape_str(shape_), " to ",
              shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  MAGI2_CHECK(dim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0],
              "row slice [", begin, ", ", end, ") out of range for shape ", shape_str(shape_));
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + begin * strides_[0] * static_cast<int64_t>(dtype_size(dtype_));
  return t;
}

Tensor Tensor::slice_cols(int64_t begin, int64_t end) const {
  MAGI2_CHECK(dim() == 2 && begin >= 0 && begin <= end && end <= shape_[1] && strides_[1] == 1,
              "column slice [", begin, ", ", end, ") out of range for shape ", shape_str(shape_));
  Tensor t = *this;
  t.shape_[1] = end - begin;
  t.data_ = static_cast<char*>(data_) + begin * static_cast<int64_t>(dtype_size(dtype_));
  return t;
}

Tensor Tensor::clone() const {
  MAGI2_CHECK(device_ == Device::CPU, "clone of a device tensor on the host");
  MAGI2_CHECK(is_contiguous(), "clone of a non-contiguous tensor");
  Tensor t = empty(shape_, dtype_);
  std::memcpy(t.data_, data_, nbytes());
  return t;
}

float Tensor::get_f32(int64_t i) const {
  switch (dtype_) {
    case DType::F32: return static_cast<const float*>(data_)[i];
    case DType::BF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(data_)[i]);
    case DType::F16: return f16_bits_to_f32(static_cast<const uint16_t*>(data_)[i]);
    case DType::F8E4M3: return f8e4m3_bits_to_f32(static_cast<const uint8_t*>(data_)[i]);
    case DType::I32: return static_cast<float>(static_cast<const int32_t*>(data_)[i]);
    case DType::I64: return static_cast<float>(static_cast<const int64_t*>(data_)[i]);
    default: throw Error(str_cat("get_f32: unsupported dtype ", dtype_name(dtype_)));
  }
}

Tensor Tensor::to(DType dtype) const {
  MAGI2_CHECK(device_ == Device::CPU && is_contiguous(), "to(): needs a contiguous CPU tensor");
  if (dtype == dtype_) return clone();
  Tensor t = empty(shape_, dtype);
  const int64_t n = numel();
  auto is_float = [](DType d) {
    return d == DType::F32 || d == DType::BF16 || d == DType::F16 || d == DType::F8E4M3;
  };
  if (is_float(dtype_) && is_float(dtype)) {
    for (int64_t i = 0; i < n; ++i) {
      float v = get_f32(i);
      switch (dtype) {
        case DType::F32: t.data_as<float>()[i] = v; break;
        case DType::BF16: t.data_as<uint16_t>()[i] = f32_to_bf16_bits(v); break;
        case DType::F16: t.data_as<uint16_t>()[i] = f32_to_f16_bits(v); break;
        case DType::F8E4M3: t.data_as<uint8_t>()[i] = f32_to_f8e4m3_bits(v); break;
        default: break;
      }
    }
    return t;
  }
  if ((dtype_ == DType::I32 || dtype_ == DType::I64) && (dtype == DType::I32 || dtype == DType::I64)) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = dtype_ == DType::I32 ? data_as<int32_t>()[i] : data_as<int64_t>()[i];
      if (dtype == DType::I32) {
        MAGI2_CHECK(v >= INT32_MIN && v <= INT32_MAX, "integer ", v, " does not fit in I32");
        t.data_as<int32_t>()[i] = static_cast<int32_t>(v);
      } else {
        t.data_as<int64_t>()[i] = v;
      }
    }
    return t;
  }
  throw Error(str_cat("unsupported conversion ", dtype_name(dtype_), " -> ", dtype_name(dtype)));
}

void check_tensor(const Tensor& t, const Shape& shape, DType dtype, const std::string& what) {
  if (t.shape() != shape || t.dtype() != dtype)
    throw Error(str_cat(what, ": expected shape ", shape_str(shape), " ", dtype_name(dtype), ", got ",
                        shape_str(t.shape()), " ", dtype_name(t.dtype())));
}

}  // namespace magi2
