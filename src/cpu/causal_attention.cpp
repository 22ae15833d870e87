// Causal grouped-query attention of the Qwen3.5 full-attention layers as torch
// SDPA computes it on the CPU (the flash-attention CPU kernel): keys in blocks
// of 512 with an online softmax; on bf16 inputs the probabilities are rounded
// to bf16 before P V while the normaliser sums their fp32 values.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "ops/text_checks.h"

namespace magi2::cpu {

namespace {
constexpr int64_t kKvBlock = 512;  // the kernel's kv split for sequences >= 512 keys
}

void causal_attention(const CausalAttentionParams& p) {
  const CausalAttentionDims dims = check_causal_attention(p, Device::CPU);
  const int64_t t = dims.t, h = dims.h, hkv = dims.hkv, hd = dims.hd;
  const DType dt = p.q.dtype();
  const bool bf = dt == DType::BF16;
  const int64_t group = h / hkv;
  // K and V widened once: [Hkv][T][hd] fp32.
  std::vector<float> kf(static_cast<size_t>(hkv * t * hd)), vf(kf.size());
#pragma omp parallel
  {
    std::vector<float> row(hkv * hd);
#pragma omp for schedule(static)
    for (int64_t j = 0; j < t; ++j) {
      load_row_f32(p.k, j, hkv * hd, row.data());
      for (int64_t g = 0; g < hkv; ++g) std::copy_n(row.data() + g * hd, hd, kf.data() + (g * t + j) * hd);
      load_row_f32(p.v, j, hkv * hd, row.data());
      for (int64_t g = 0; g < hkv; ++g) std::copy_n(row.data() + g * hd, hd, vf.data() + (g * t + j) * hd);
    }
  }
#pragma omp parallel
  {
    std::vector<float> qrow(h * hd), orow(h * hd), z(kKvBlock), acc(hd);
#pragma omp for schedule(dynamic, 4)
    for (int64_t i = 0; i < t; ++i) {
      load_row_f32(p.q, i, h * hd, qrow.data());
      for (int64_t qh = 0; qh < h; ++qh) {
        const float* q = qrow.data() + qh * hd;
        const float* kh = kf.data() + (qh / group) * t * hd;
        const float* vh = vf.data() + (qh / group) * t * hd;
        float m = -std::numeric_limits<float>::infinity(), sum = 0.f;
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t j0 = 0; j0 <= i; j0 += kKvBlock) {
          const int64_t n = std::min(kKvBlock, i + 1 - j0);
          float bm = m;
          for (int64_t j = 0; j < n; ++j) {
            z[j] = dot_f32(q, kh + (j0 + j) * hd, hd) * p.scale;
            bm = std::max(bm, z[j]);
          }
          const float corr = std::exp(m - bm);  // 0 on the first block (m = -inf)
          float bsum = 0.f;
          for (int64_t j = 0; j < n; ++j) {
            z[j] = std::exp(z[j] - bm);
            bsum += z[j];
          }
          sum = bsum + corr * sum;
          for (int64_t d = 0; d < hd; ++d) acc[d] *= corr;
          for (int64_t j = 0; j < n; ++j) {
            const float pj = bf ? round_bf16(z[j]) : z[j];
            const float* vj = vh + (j0 + j) * hd;
            for (int64_t d = 0; d < hd; ++d) acc[d] += pj * vj[d];
          }
          m = bm;
        }
        const float inv = 1.0f / sum;
        for (int64_t d = 0; d < hd; ++d) orow[qh * hd + d] = acc[d] * inv;
      }
      store_row(p.o, i, h * hd, orow.data());
    }
  }
}

}  // namespace magi2::cpu
