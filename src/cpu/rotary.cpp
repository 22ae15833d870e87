// Partial half-split rotary embedding of the Qwen3.5 full-attention layers
// (transformers apply_rotary_pos_emb with Qwen3_5TextRotaryEmbedding; M-RoPE
// with equal position rows, the text-only case, is plain RoPE).
#include <cmath>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"

namespace magi2::cpu {

void rotary(const RotaryParams& p) {
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  MAGI2_CHECK(p.heads >= 1 && cols % p.heads == 0, "rotary: ", cols, " columns do not split into ", p.heads, " heads");
  const int64_t hd = cols / p.heads, rot = p.rotary_dim, half = rot / 2;
  check_2d(p.x, rows, cols, "rotary.x");
  MAGI2_CHECK(p.x.dtype() == DType::BF16 || p.x.dtype() == DType::F32, "rotary.x: expected bf16 or f32");
  MAGI2_CHECK(rot >= 2 && rot % 2 == 0 && rot <= hd, "rotary: rotary_dim ", rot, " must be even and <= head_dim ", hd);
  MAGI2_CHECK(p.inv_freq.dtype() == DType::F32 && p.inv_freq.numel() == half, "rotary.inv_freq: expected ", half,
              " f32 values");
  MAGI2_CHECK(p.positions == nullptr || static_cast<int64_t>(p.positions->size()) == rows,
              "rotary: ", p.positions ? p.positions->size() : 0, " positions for ", rows, " rows");
  const float* inv = p.inv_freq.data_as<float>();
  const bool bf = p.x.dtype() == DType::BF16;
  auto rnd = [bf](float v) { return bf ? round_bf16(v) : v; };
#pragma omp parallel
  {
    std::vector<float> x(cols), c(half), s(half);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float pos = static_cast<float>(p.positions ? (*p.positions)[r] : r);
      for (int64_t i = 0; i < half; ++i) {
        const float f = pos * inv[i];
        // The table is cast to the activations' dtype before use.
        c[i] = rnd(std::cos(f));
        s[i] = rnd(std::sin(f));
      }
      load_row_f32(p.x, r, cols, x.data());
      for (int64_t h = 0; h < p.heads; ++h) {
        float* v = x.data() + h * hd;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = v[i], x2 = v[i + half];
          v[i] = rnd(rnd(x1 * c[i]) + rnd(-x2 * s[i]));
          v[i + half] = rnd(rnd(x2 * c[i]) + rnd(x1 * s[i]));
        }
      }
      store_row(p.x, r, cols, x.data());
    }
  }
}

}  // namespace magi2::cpu
