// Partial half-split rotary embedding of the Qwen3.5 full-attention layers
// (transformers apply_rotary_pos_emb with Qwen3_5TextRotaryEmbedding; M-RoPE
// with equal position rows, the text-only case, is plain RoPE).
#include <cmath>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "ops/text_checks.h"
#include "ops/text_numerics.h"

namespace magi2::cpu {

void rotary(const RotaryParams& p) {
  const RotaryDims dims = check_rotary(p, Device::CPU);
  const int64_t rows = dims.rows, cols = p.x.size(1), hd = dims.head_dim, half = dims.half;
  const float* inv = p.inv_freq.data_as<float>();
  const bool bf = p.x.dtype() == DType::BF16;
#pragma omp parallel
  {
    std::vector<float> x(cols), c(half), s(half);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float pos = static_cast<float>(p.positions ? (*p.positions)[r] : r);
      for (int64_t i = 0; i < half; ++i) {
        const float f = pos * inv[i];
        // The table is cast to the activations' dtype before use.
        c[i] = text_round(std::cos(f), bf);
        s[i] = text_round(std::sin(f), bf);
      }
      load_row_f32(p.x, r, cols, x.data());
      for (int64_t h = 0; h < p.heads; ++h) {
        float* v = x.data() + h * hd;
        for (int64_t i = 0; i < half; ++i) rotary_pair(v[i], v[i + half], c[i], s[i], bf, v[i], v[i + half]);
      }
      store_row(p.x, r, cols, x.data());
    }
  }
}

}  // namespace magi2::cpu
