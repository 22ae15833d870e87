// A tensor filled element by element from a pure function of the index, on
// every core: the random-weight writers (tiny and release-width models) draw
// each element from (name, seed, index) alone (core/seeded_random.h), so the
// order of evaluation does not change a byte and the fill parallelises freely.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace magi2 {

/// A contiguous CPU tensor of `shape` and `dtype` (F32 or BF16) whose element
/// i is `value(i)` (a double or float, rounded to fp32, then for BF16 to
/// nearest even: the bytes of Tensor::from_f32(v).to(dtype)). `value` is
/// called concurrently from OpenMP threads and must be pure. Error naming the
/// dtype for any other dtype.
template <typename F>
Tensor seeded_tensor(const Shape& shape, DType dtype, F&& value) {
  MAGI2_CHECK(dtype == DType::F32 || dtype == DType::BF16, "seeded_tensor: F32 or BF16 only, got ",
              dtype_name(dtype));
  Tensor t = Tensor::empty(shape, dtype);
  const int64_t n = t.numel();
  if (dtype == DType::F32) {
    float* d = t.data_as<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(value(static_cast<uint64_t>(i)));
  } else {
    uint16_t* d = t.data_as<uint16_t>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16_bits(static_cast<float>(value(static_cast<uint64_t>(i))));
  }
  return t;
}

}  // namespace magi2
