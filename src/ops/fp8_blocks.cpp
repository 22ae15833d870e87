#include "ops/fp8_blocks.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/numerics.h"

namespace magi2 {

namespace {

int64_t blocks_of(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

// (leading matrices, rows A, cols B) of a >= 2-D shape.
void matrix_dims(const Shape& s, int64_t* mats, int64_t* a, int64_t* b, const std::string& what) {
  MAGI2_CHECK(s.size() >= 2, what, ": FP8 block scales need a tensor of at least 2 dimensions, got ", shape_str(s));
  *mats = 1;
  for (size_t i = 0; i + 2 < s.size(); ++i) *mats *= s[i];
  *a = s[s.size() - 2];
  *b = s[s.size() - 1];
}

}  // namespace

Shape fp8_scale_shape(const Shape& shape) {
  MAGI2_CHECK(shape.size() >= 2, "FP8 block scales need a tensor of at least 2 dimensions, got ", shape_str(shape));
  Shape s = shape;
  s[s.size() - 2] = blocks_of(s[s.size() - 2]);
  s[s.size() - 1] = blocks_of(s[s.size() - 1]);
  return s;
}

std::string fp8_scale_name(const std::string& name) { return name + "_scale_inv"; }

void check_fp8_pair(const Tensor& q, const Tensor& scale_inv, const std::string& what) {
  MAGI2_CHECK(q.defined() && q.dtype() == DType::F8E4M3, what, ": expected F8_E4M3 values");
  MAGI2_CHECK(q.dim() >= 2, what, ": FP8 block scales need at least 2 dimensions, got ", shape_str(q.shape()));
  const Shape want = fp8_scale_shape(q.shape());
  MAGI2_CHECK(scale_inv.defined() && scale_inv.dtype() == DType::F32 && scale_inv.shape() == want, what,
              "_scale_inv: expected F32 ", shape_str(want), " (one scale per 128 x 128 block), got ",
              scale_inv.defined() ? str_cat(dtype_name(scale_inv.dtype()), " ", shape_str(scale_inv.shape()))
                                  : std::string("nothing"));
}

namespace {

// The block loop for one element reader (inlined per source dtype).
template <typename Load>
void quantize_blocks(const Load& load, int64_t mats, int64_t a, int64_t b, uint8_t* q, float* sc, int64_t* bad_at) {
  const int64_t ba = blocks_of(a), bb = blocks_of(b);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < ba; ++i) {
      for (int64_t j = 0; j < bb; ++j) {
        const int64_t r1 = std::min(a, (i + 1) * kFp8Block), c1 = std::min(b, (j + 1) * kFp8Block);
        float amax = 0.f;
        bool finite = true;
        for (int64_t r = i * kFp8Block; r < r1; ++r)
          for (int64_t c = j * kFp8Block; c < c1; ++c) {
            const float v = load((m * a + r) * b + c);
            finite = finite && std::isfinite(v);
            amax = std::max(amax, std::fabs(v));
          }
        if (!finite) {
#pragma omp critical
          *bad_at = m * a * b + i * kFp8Block * b + j * kFp8Block;
          continue;
        }
        const float s = amax > 0.f ? amax / kE4m3Max : 1.0f;
        sc[(m * ba + i) * bb + j] = s;
        for (int64_t r = i * kFp8Block; r < r1; ++r)
          for (int64_t c = j * kFp8Block; c < c1; ++c) {
            const int64_t e = (m * a + r) * b + c;
            q[e] = f32_to_e4m3_bits(load(e) / s);
          }
      }
    }
}

}  // namespace

Fp8Blocks quantize_fp8_blocks(const Tensor& w, const std::string& what) {
  MAGI2_CHECK(w.defined() && w.device() == Device::CPU && w.is_contiguous(), what,
              ": quantisation needs a contiguous CPU tensor");
  MAGI2_CHECK(w.dtype() == DType::BF16 || w.dtype() == DType::F16 || w.dtype() == DType::F32, what,
              ": cannot quantise a ", dtype_name(w.dtype()), " tensor to FP8 (expected a float type)");
  int64_t mats, a, b;
  matrix_dims(w.shape(), &mats, &a, &b, what);
  Fp8Blocks out{Tensor::empty(w.shape(), DType::F8E4M3), Tensor::empty(fp8_scale_shape(w.shape()), DType::F32)};
  uint8_t* q = out.q.data_as<uint8_t>();
  float* sc = out.scale_inv.data_as<float>();
  int64_t bad_at = -1;
  if (w.dtype() == DType::BF16) {
    const uint16_t* p = w.data_as<uint16_t>();
    quantize_blocks([p](int64_t e) { return bf16_bits_to_f32(p[e]); }, mats, a, b, q, sc, &bad_at);
  } else if (w.dtype() == DType::F32) {
    const float* p = w.data_as<float>();
    quantize_blocks([p](int64_t e) { return p[e]; }, mats, a, b, q, sc, &bad_at);
  } else {
    const uint16_t* p = w.data_as<uint16_t>();
    quantize_blocks([p](int64_t e) { return f16_bits_to_f32(p[e]); }, mats, a, b, q, sc, &bad_at);
  }
  MAGI2_CHECK(bad_at < 0, what, ": non-finite value in the 128 x 128 block starting at flat element ", bad_at,
              "; cannot quantise it to FP8");
  return out;
}

Tensor dequantize_fp8_blocks(const Tensor& q, const Tensor& scale_inv, const std::string& what) {
  check_fp8_pair(q, scale_inv, what);
  MAGI2_CHECK(q.device() == Device::CPU && q.is_contiguous() && scale_inv.device() == Device::CPU &&
                  scale_inv.is_contiguous(),
              what, ": dequantisation needs contiguous CPU tensors");
  int64_t mats, a, b;
  matrix_dims(q.shape(), &mats, &a, &b, what);
  const int64_t ba = blocks_of(a), bb = blocks_of(b);
  Tensor out = Tensor::empty(q.shape(), DType::BF16);
  const uint8_t* qp = q.data_as<uint8_t>();
  const float* sc = scale_inv.data_as<float>();
  uint16_t* o = out.data_as<uint16_t>();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t r = 0; r < a; ++r) {
      const float* srow = sc + (m * ba + r / kFp8Block) * bb;
      const int64_t base = (m * a + r) * b;
      for (int64_t c = 0; c < b; ++c) o[base + c] = f32_to_bf16_bits(fp8_dequant_f32(qp[base + c], srow[c / kFp8Block]));
    }
  return out;
}

}  // namespace magi2
