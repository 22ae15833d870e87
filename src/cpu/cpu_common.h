// Internal helpers of the CPU reference backend: typed row access, the
// fixed-order dot product, and the OpenMP row loop.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/numerics.h"
#include "ops/op_checks.h"
#include "ops/ops.h"

// Hot loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at
// load time. With FMA contraction off project-wide and every reduction order
// written out, each clone gives the same bytes as the others.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MAGI2_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MAGI2_CPU_CLONES
#endif

namespace magi2::cpu {

/// Pointer to row r of a 2-D (row-strided) tensor, in bytes.
inline char* row_ptr(const Tensor& t, int64_t r) {
  return static_cast<char*>(t.data()) + r * t.row_stride() * static_cast<int64_t>(dtype_size(t.dtype()));
}

/// Loads n elements (F32 or BF16) of row r into dst as fp32.
inline void load_row_f32(const Tensor& t, int64_t r, int64_t n, float* dst) {
  if (t.dtype() == DType::F32) {
    const float* s = reinterpret_cast<const float*>(row_ptr(t, r));
    for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
  } else {
    const uint16_t* s = reinterpret_cast<const uint16_t*>(row_ptr(t, r));
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(s[i]);
  }
}

/// Stores n fp32 values into row r (F32 as is, BF16 rounded RNE).
inline void store_row(const Tensor& t, int64_t r, int64_t n, const float* src) {
  if (t.dtype() == DType::F32) {
    float* d = reinterpret_cast<float*>(row_ptr(t, r));
    for (int64_t i = 0; i < n; ++i) d[i] = src[i];
  } else {
    uint16_t* d = reinterpret_cast<uint16_t*>(row_ptr(t, r));
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16_bits(src[i]);
  }
}

/// fp32 dot product with a fixed summation order (16 interleaved partial sums,
/// then a fixed pairwise tree), so the result depends only on the inputs and
/// the compiler may vectorise it without -ffast-math.
inline float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

/// RMSNorm of one d-vector in place with gain (1 + w) (spec §4.1): the mean is
/// the fixed-order fp32 sum times fp32(1/d), then x * rsqrt(ms + eps) * (w + 1).
/// Shared by rms_norm and the mHC logits so both normalise identically.
inline void rms_normalize(float* x, int64_t d, const float* w, float eps) {
  const float ms = dot_f32(x, x, d) * (1.0f / static_cast<float>(d));
  const float rs = 1.0f / std::sqrt(ms + eps);
  for (int64_t i = 0; i < d; ++i) x[i] = (x[i] * rs) * (w[i] + 1.0f);
}

inline float sigmoid_f32(float z) { return 1.0f / (1.0f + std::exp(-z)); }

/// SwiGLU7 of one (gate, up) pair in fp32 (ops/numerics.h
/// swiglu7_f32 with the glibc-exact sigmoid); the caller rounds to bf16.
inline float swiglu7_exact_f32(float g, float u) {
  return swiglu7_f32(g, u, [](float z) { return sigmoid_f32(z); });
}

/// Index of the weight group that holds row r.
inline int group_of(const Groups& g, int64_t r) {
  int m = 0;
  while (m + 1 < g.count && r >= g.cu[m + 1]) ++m;
  return m;
}

/// Checks that t is 2-D [rows, cols] with unit column stride and the dtype.
void check_2d(const Tensor& t, int64_t rows, int64_t cols, const char* what);
void check_groups(const Groups& g, int64_t rows, const char* what);

}  // namespace magi2::cpu
