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

namespace {

// out = x * bf16?(act(g)) row by row: the shared form of the two gates; act's
// result is rounded to bf16 first in the bf16 path (the official
// act(g).to(bf16) * x), and the product rounds once on store.
template <typename Act>
void gated_product(const Tensor& x, const Tensor& g, const Tensor& out, const char* op, Act act) {
  const int64_t rows = out.size(0), cols = out.size(1);
  const std::string n(op);
  check_2d(x, rows, cols, (n + ".x").c_str());
  check_2d(g, rows, cols, (n + ".g").c_str());
  check_2d(out, rows, cols, (n + ".out").c_str());
  const DType dt = out.dtype();
  check_float(x, dt, (n + ".x").c_str());
  check_float(g, dt, (n + ".g").c_str());
  check_float(out, dt, (n + ".out").c_str());
  const bool bf = dt == DType::BF16;
#pragma omp parallel
  {
    std::vector<float> xv(cols), gv(cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row_f32(x, r, cols, xv.data());
      load_row_f32(g, r, cols, gv.data());
      for (int64_t i = 0; i < cols; ++i) {
        const float s = act(gv[i]);
        xv[i] = (bf ? round_bf16(s) : s) * xv[i];
      }
      store_row(out, r, cols, xv.data());
    }
  }
}

}  // namespace

void sigmoid_mul(const SigmoidMulParams& p) {
  gated_product(p.x, p.g, p.out, "sigmoid_mul", [](float v) { return sigmoid_f32(v); });
}

void silu_mul(const SiluMulParams& p) {
  gated_product(p.up, p.gate, p.out, "silu_mul", [](float v) { return silu_f32(v); });
}

}  // namespace magi2::cpu
