// Element-wise Fourier RoPE table (spec magi2-dit.md §4.4, official
// ElementWiseFourierEmbed) and its half-split application (spec §4.5).
#include <cmath>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"

namespace magi2::cpu {

void rope_table(const RopeTableParams& p) {
  const int64_t t = p.coords.size(0);
  const int64_t nb = p.bands.numel();
  check_2d(p.coords, t, 9, "rope_table.coords");
  check_2d(p.out, t, 6 * nb, "rope_table.out");
  MAGI2_CHECK(p.coords.dtype() == DType::F32 && p.bands.dtype() == DType::F32 && p.out.dtype() == DType::F32,
              "rope_table: expected f32 coords, bands and output");
  const float* bands = p.bands.data_as<float>();
  int64_t bad_row = -1;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < t; ++n) {
    const float* c = reinterpret_cast<const float*>(row_ptr(p.coords, n));
    float* o = reinterpret_cast<float*>(row_ptr(p.out, n));
    for (int a = 0; a < 3; ++a) {
      const float size = c[3 + a], ref = c[6 + a];
      float scale = (ref - 1.0f) / (size - 1.0f);
      if (ref == 1.0f && size == 1.0f) scale = 1.0f;
      if (!std::isfinite(scale)) {
#pragma omp critical
        bad_row = n;
        scale = 0.0f;
      }
      // The time axis is not centred (spec §4.4).
      const float center = a == 0 ? 0.0f : (size - 1.0f) / 2.0f;
      const float x = c[a] - center;
      for (int64_t b = 0; b < nb; ++b) {
        const float theta = (x * scale) * bands[b];
        o[a * nb + b] = std::sin(theta);
        o[3 * nb + a * nb + b] = std::cos(theta);
      }
    }
  }
  MAGI2_CHECK(bad_row < 0, "rope_table: coordinates of token ", bad_row,
              " give a non-finite RoPE scale (size 1 with a reference size != 1)");
}

void rope(const RopeParams& p) {
  MAGI2_CHECK(p.x.dim() == 3 && p.x.is_contiguous() && p.x.dtype() == DType::F32,
              "rope.x: expected contiguous f32 [T, H, hd]");
  const int64_t t = p.x.size(0), h = p.x.size(1), hd = p.x.size(2);
  MAGI2_CHECK(p.out.dim() == 3 && p.out.size(0) == t && p.out.size(1) == h && p.out.size(2) == hd &&
                  p.out.is_contiguous() && p.out.dtype() == DType::BF16,
              "rope.out: expected contiguous bf16 ", shape_str({t, h, hd}));
  const int64_t half = p.table.size(1) / 2;  // rotary_dim / 2
  check_2d(p.table, t, 2 * half, "rope.table");
  MAGI2_CHECK(p.table.dtype() == DType::F32, "rope.table: expected f32");
  MAGI2_CHECK(2 * half <= hd, "rope: rotary dim ", 2 * half, " exceeds head dim ", hd);
  const int32_t* src_rows = p.src_rows.defined() ? check_index_on(Device::CPU, p.src_rows, t, "rope.src_rows") : nullptr;
  if (src_rows)
    for (int64_t n = 0; n < t; ++n)
      MAGI2_CHECK(src_rows[n] >= 0 && src_rows[n] < t, "rope: src_rows[", n, "] = ", src_rows[n],
                  " is outside the ", t, " rows of x");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < t; ++n) {
    const int64_t s = src_rows ? src_rows[n] : n;
    const float* tab = reinterpret_cast<const float*>(row_ptr(p.table, n));
    const float* sn = tab;         // sin block
    const float* cs = tab + half;  // cos block
    for (int64_t k = 0; k < h; ++k) {
      const float* x = p.x.data_as<float>() + (s * h + k) * hd;
      uint16_t* y = p.out.data_as<uint16_t>() + (n * h + k) * hd;
      for (int64_t i = 0; i < half; ++i) {
        // Each product rounded separately, then the sum (eager PyTorch, no FMA).
        const float a = x[i] * cs[i];
        const float b = (-x[i + half]) * sn[i];
        const float c = x[i + half] * cs[i];
        const float d = x[i] * sn[i];
        y[i] = f32_to_bf16_bits(a + b);
        y[i + half] = f32_to_bf16_bits(c + d);
      }
      for (int64_t i = 2 * half; i < hd; ++i) y[i] = f32_to_bf16_bits(x[i]);
    }
  }
}

}  // namespace magi2::cpu
