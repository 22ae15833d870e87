// Gated element-wise ops of the Qwen3.5 text encoder (transformers
// Qwen3_5RMSNormGated, the gated-attention output gate, the SiLU-gated MLP),
// at the rounding points of torch's bf16 CPU element-wise ops: every bf16
// tensor op computes in fp32 and rounds its result once.
#include <cmath>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "ops/text_checks.h"
#include "ops/text_numerics.h"

namespace magi2::cpu {

void gated_rms_norm(const GatedRmsNormParams& p) {
  const int64_t d = check_gated_rms_norm(p, Device::CPU);
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  const DType dt = p.x.dtype();
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
        for (int64_t i = 0; i < d; ++i) xh[i] = gated_rms_element(xh[i], rs, w[i], zh[i], bf);
      }
      store_row(p.y, r, cols, x.data());
    }
  }
}

namespace {

// out = x * bf16?(act(g)) row by row: the shared form of the two gates
// (text_numerics.h gated_product); the product rounds once on store.
template <typename Act>
void gated_rows(const Tensor& x, const Tensor& g, const Tensor& out, const char* op, Act act) {
  check_gated_product(x, g, out, op, Device::CPU);
  const int64_t rows = out.size(0), cols = out.size(1);
  const DType dt = out.dtype();
  const bool bf = dt == DType::BF16;
#pragma omp parallel
  {
    std::vector<float> xv(cols), gv(cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row_f32(x, r, cols, xv.data());
      load_row_f32(g, r, cols, gv.data());
      for (int64_t i = 0; i < cols; ++i) xv[i] = gated_product(act(gv[i]), xv[i], bf);
      store_row(out, r, cols, xv.data());
    }
  }
}

}  // namespace

void sigmoid_mul(const SigmoidMulParams& p) {
  gated_rows(p.x, p.g, p.out, "sigmoid_mul", [](float v) { return text_sigmoid(v); });
}

void silu_mul(const SiluMulParams& p) {
  gated_rows(p.up, p.gate, p.out, "silu_mul", [](float v) { return text_silu(v); });
}

}  // namespace magi2::cpu
