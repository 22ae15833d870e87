// Gated element-wise ops of the Qwen3.5 text encoder (transformers
// Qwen3_5RMSNormGated, the gated-attention output gate, the SiLU-gated MLP),
// at the rounding points of torch's bf16 CPU element-wise ops: every bf16
// tensor op computes in fp32 and rounds its result once.
#include <cmath>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"

namespace magi2::cpu {

namespace {

inline float silu_f32(float x) { return x / (1.0f + std::exp(-x)); }

void check_float(const Tensor& t, DType dt, const char* what) {
  MAGI2_CHECK(t.dtype() == dt && (dt == DType::BF16 || dt == DType::F32), what,
              ": expected all operands bf16 or all f32, got ", dtype_name(t.dtype()));
}

}  // namespace

void gated_rms_norm(const GatedRmsNormParams& p) {
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  MAGI2_CHECK(p.heads >= 1 && cols % p.heads == 0, "gated_rms_norm: ", cols, " columns do not split into ", p.heads,
              " heads");
  const int64_t d = cols / p.heads;
  check_2d(p.x, rows, cols, "gated_rms_norm.x");
  check_2d(p.z, rows, cols, "gated_rms_norm.z");
  check_2d(p.y, rows, cols, "gated_rms_norm.y");
  const DType dt = p.x.dtype();
  check_float(p.x, dt, "gated_rms_norm.x");
  check_float(p.z, dt, "gated_rms_norm.z");
  check_float(p.y, dt, "gated_rms_norm.y");
  MAGI2_CHECK(p.w.dtype() == DType::F32 && p.w.numel() == d, "gated_rms_norm.w: expected ", d, " f32 values, got ",
              shape_str(p.w.shape()));
  const float* w = p.w.data_as<float>();
  const bool bf = dt == DType::BF16;
#pragma omp parallel
  {
    std::vector<float> x(cols), z(cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row_f32(p.x, r, cols, x.data());
      load_row_f32(p.z, r, cols, z.data());
      for (int64_t h = 0; h < p.heads; ++h) {
        float* xh = x.data() + h * d;
        const float* zh = z.data() + h * d;
        const float ms = dot_f32(xh, xh, d) * (1.0f / static_cast<float>(d));
        const float rs = 1.0f / std::sqrt(ms + p.eps);
        for (int64_t i = 0; i < d; ++i) {
          float n = xh[i] * rs;
          if (bf)
            n = round_bf16(w[i] * round_bf16(n));  // weight * x.to(bf16): a bf16 product
          else
            n = w[i] * n;
          xh[i] = n * silu_f32(zh[i]);  // bf16 * fp32 promotes to fp32; one final rounding
        }
      }
      store_row(p.y, r, cols, x.data());
    }
  }
}

void sigmoid_mul(const SigmoidMulParams& p) {
  const int64_t rows = p.out.size(0), cols = p.out.size(1);
  check_2d(p.x, rows, cols, "sigmoid_mul.x");
  check_2d(p.g, rows, cols, "sigmoid_mul.g");
  check_2d(p.out, rows, cols, "sigmoid_mul.out");
  const DType dt = p.out.dtype();
  check_float(p.x, dt, "sigmoid_mul.x");
  check_float(p.g, dt, "sigmoid_mul.g");
  check_float(p.out, dt, "sigmoid_mul.out");
  const bool bf = dt == DType::BF16;
#pragma omp parallel
  {
    std::vector<float> x(cols), g(cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row_f32(p.x, r, cols, x.data());
      load_row_f32(p.g, r, cols, g.data());
      for (int64_t i = 0; i < cols; ++i) {
        const float s = sigmoid_f32(g[i]);
        x[i] *= bf ? round_bf16(s) : s;
      }
      store_row(p.out, r, cols, x.data());
    }
  }
}

void silu_mul(const SiluMulParams& p) {
  const int64_t rows = p.out.size(0), cols = p.out.size(1);
  check_2d(p.gate, rows, cols, "silu_mul.gate");
  check_2d(p.up, rows, cols, "silu_mul.up");
  check_2d(p.out, rows, cols, "silu_mul.out");
  const DType dt = p.out.dtype();
  check_float(p.gate, dt, "silu_mul.gate");
  check_float(p.up, dt, "silu_mul.up");
  check_float(p.out, dt, "silu_mul.out");
  const bool bf = dt == DType::BF16;
#pragma omp parallel
  {
    std::vector<float> g(cols), u(cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row_f32(p.gate, r, cols, g.data());
      load_row_f32(p.up, r, cols, u.data());
      for (int64_t i = 0; i < cols; ++i) {
        const float s = silu_f32(g[i]);
        g[i] = (bf ? round_bf16(s) : s) * u[i];
      }
      store_row(p.out, r, cols, g.data());
    }
  }
}

}  // namespace magi2::cpu
