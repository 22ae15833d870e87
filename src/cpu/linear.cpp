// Grouped linear (spec magi2-dit.md §4.2, §3.8): y = x W_m^T (+ b_m), fp32
// accumulation in a fixed order (dot_f32), one rounding to y's dtype.
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"

namespace magi2::cpu {

namespace {

// Output features are processed in tiles whose weights are widened to fp32
// once and then shared by every row of the group.
constexpr int64_t kTile = 64;

void widen_rows(const Tensor& w, int64_t row0, int64_t n, int64_t in, float* dst) {
  if (w.dtype() == DType::F32) {
    const float* s = w.data_as<float>() + row0 * in;
    for (int64_t i = 0; i < n * in; ++i) dst[i] = s[i];
  } else {
    const uint16_t* s = w.data_as<uint16_t>() + row0 * in;
    for (int64_t i = 0; i < n * in; ++i) dst[i] = bf16_bits_to_f32(s[i]);
  }
}

}  // namespace

void linear(const LinearParams& p) {
  const int64_t rows = p.x.size(0), in = p.x.size(1), out = p.y.size(1);
  check_2d(p.x, rows, in, "linear.x");
  check_2d(p.y, rows, out, "linear.y");
  check_groups(p.groups, rows, "linear");
  const DType dt = p.x.dtype();
  MAGI2_CHECK((dt == DType::BF16 || dt == DType::F32) && p.w.dtype() == dt && p.y.dtype() == dt,
              "linear: x, W and y must all be bf16 or all f32");
  MAGI2_CHECK(p.w.is_contiguous() && p.w.dim() == 2 && p.w.size(0) == out * p.groups.count && p.w.size(1) == in,
              "linear.w: expected [", out * p.groups.count, ", ", in, "], got ", shape_str(p.w.shape()));
  const float* bias = nullptr;
  if (p.bias.defined()) {
    MAGI2_CHECK(p.bias.dtype() == DType::F32 && p.bias.numel() == out * p.groups.count,
                "linear.bias: expected ", out * p.groups.count, " f32 values");
    bias = p.bias.data_as<float>();
  }
  std::vector<float> wt(static_cast<size_t>(kTile * in));
  std::vector<float> xf(static_cast<size_t>(rows * in));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) load_row_f32(p.x, r, in, xf.data() + r * in);
  for (int g = 0; g < p.groups.count; ++g) {
    const int64_t r0 = p.groups.cu[g], r1 = p.groups.cu[g + 1];
    if (r0 == r1) continue;
    for (int64_t o0 = 0; o0 < out; o0 += kTile) {
      const int64_t n = std::min(kTile, out - o0);
      widen_rows(p.w, g * out + o0, n, in, wt.data());
#pragma omp parallel
      {
        float acc[kTile];
#pragma omp for schedule(static)
        for (int64_t r = r0; r < r1; ++r) {
          const float* xr = xf.data() + r * in;
          for (int64_t j = 0; j < n; ++j) {
            float v = dot_f32(xr, wt.data() + j * in, in);
            if (bias) v += bias[g * out + o0 + j];
            acc[j] = v;
          }
          if (dt == DType::F32) {
            float* y = reinterpret_cast<float*>(row_ptr(p.y, r)) + o0;
            for (int64_t j = 0; j < n; ++j) y[j] = acc[j];
          } else {
            uint16_t* y = reinterpret_cast<uint16_t*>(row_ptr(p.y, r)) + o0;
            for (int64_t j = 0; j < n; ++j) y[j] = f32_to_bf16_bits(acc[j]);
          }
        }
      }
    }
  }
}

}  // namespace magi2::cpu
