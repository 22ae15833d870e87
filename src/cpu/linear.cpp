// Grouped linear (spec magi2-dit.md §4.2, §3.8): y = x W_m^T (+ b_m), fp32
// accumulation in a fixed order (dot_f32), one rounding to y's dtype.
//
// Speed: outputs are computed in register tiles of kTileR rows x kTileN
// features; each of the 16 interleaved partial sums of dot_f32 becomes one
// vector lane, so a tile is 16 vector accumulators and every element sees
// exactly dot_f32's operation sequence (same bytes as the scalar form, on
// every ISA clone).
#include <algorithm>
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

constexpr int kTileR = 4;  // rows per register tile
constexpr int kTileN = 4;  // output features per register tile

/// out[r][j] = dot_f32(x + r*ldx, w + j*ldw, n) for r < nr <= kTileR, j < nj <= kTileN.
MAGI2_CPU_CLONES
void dot_tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t n, int nr, int nj,
              float out[kTileR][kTileN]) {
  float acc[kTileR][kTileN][16] = {};
  int64_t i = 0;
  if (nr == kTileR && nj == kTileN) {
    for (; i + 16 <= n; i += 16)
      for (int r = 0; r < kTileR; ++r)
        for (int j = 0; j < kTileN; ++j)
          for (int l = 0; l < 16; ++l) acc[r][j][l] += x[r * ldx + i + l] * w[j * ldw + i + l];
  } else {
    for (; i + 16 <= n; i += 16)
      for (int r = 0; r < nr; ++r)
        for (int j = 0; j < nj; ++j)
          for (int l = 0; l < 16; ++l) acc[r][j][l] += x[r * ldx + i + l] * w[j * ldw + i + l];
  }
  for (int r = 0; r < nr; ++r)
    for (int j = 0; j < nj; ++j) {
      float* a = acc[r][j];
      for (int64_t k = i, l = 0; k < n; ++k, ++l) a[l] += x[r * ldx + k] * w[j * ldw + k];
      for (int wdt = 8; wdt >= 1; wdt /= 2)
        for (int l = 0; l < wdt; ++l) a[l] += a[l + wdt];
      out[r][j] = a[0];
    }
}

}  // namespace

void linear(const LinearParams& p) {
  if (p.w_scale.defined() || p.w.dtype() == DType::F8E4M3) return linear_fp8(p);
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
      const int64_t nblocks = (r1 - r0 + kTileR - 1) / kTileR;
#pragma omp parallel for schedule(static)
      for (int64_t b = 0; b < nblocks; ++b) {
        const int64_t rb = r0 + b * kTileR;
        const int nr = static_cast<int>(std::min<int64_t>(kTileR, r1 - rb));
        float tile[kTileR][kTileN];
        for (int64_t j0 = 0; j0 < n; j0 += kTileN) {
          const int nj = static_cast<int>(std::min<int64_t>(kTileN, n - j0));
          dot_tile(xf.data() + rb * in, in, wt.data() + j0 * in, in, in, nr, nj, tile);
          for (int r = 0; r < nr; ++r)
            for (int j = 0; j < nj; ++j) {
              float v = tile[r][j];
              if (bias) v += bias[g * out + o0 + j0 + j];
              if (dt == DType::F32)
                reinterpret_cast<float*>(row_ptr(p.y, rb + r))[o0 + j0 + j] = v;
              else
                reinterpret_cast<uint16_t*>(row_ptr(p.y, rb + r))[o0 + j0 + j] = f32_to_bf16_bits(v);
            }
        }
      }
    }
  }
}

}  // namespace magi2::cpu
