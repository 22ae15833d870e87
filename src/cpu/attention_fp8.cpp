// The reference of FP8 attention (AttentionParams::fp8, docs/fp8.md): the
// rounding points of the CUDA kernel (attention_flash.cu in FP8, quantised by
// attention_fp8.cu), computed chunk by chunk in its order so that P's e4m3
// rounding sees the same running maximum. Per sample, head and query row:
//   q8 = e4m3(q / sq), sq = fp8_act_scale(amax of the row's 128 values);
//   per 128-key tile j of the sample (K and V alike): k8 = e4m3(k / sk_j),
//   v8 = e4m3(v / sv_j), sk_j / sv_j from the tile's amax;
//   s = sum_d q8 k8 (fp32), x = s c_j with c_j = (scale log2 e sq) sk_j;
//   m_j = max(m_{j-1}, c_j max s), alpha = 2^(m_{j-1} - m_j);
//   e = 2^(s c_j + (8 - m_j)), l = l alpha + sum e (fp32, before rounding);
//   P8 = e4m3(e); acc = acc alpha sv_{j-1} / sv_j + P8 v8 (fp32, in sv_j's units);
//   o = bf16(acc (sv_last / l)), lse = ln 2 (m + log2 l - 8).
// The GPU sums in another order and uses ex2.approx, so a few P8 values sit
// one e4m3 step apart: the op table judges the result by a tolerance. Any
// head dim here (the tiny models' too); the CUDA kernel takes 128.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "ops/numerics.h"

namespace magi2::cpu {

namespace {

/// e4m3 values (decoded) of rows [r0, r0 + n) of one head with one scale over
/// all of them: out [n, hd]; returns the scale.
float quantize_tile(const uint16_t* x, int64_t h, int64_t hd, int64_t head, int64_t r0, int64_t n, float* out) {
  float amax = 0.f;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < hd; ++d) amax = fp8_amax_step(amax, bf16_bits_to_f32(x[((r0 + r) * h + head) * hd + d]));
  const float sc = fp8_act_scale(amax);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < hd; ++d)
      out[r * hd + d] = e4m3_bits_to_f32(fp8_act_quant(bf16_bits_to_f32(x[((r0 + r) * h + head) * hd + d]), sc));
  return sc;
}

}  // namespace

void attention_fp8(const AttentionParams& p) {
  MAGI2_CHECK(p.lse.defined(), "attention.fp8: needs the lse output (the deferred sink)");
  const std::vector<int32_t> cu = check_attention(p);
  const int64_t h = p.q.size(1), hd = p.q.size(2);
  const uint16_t* q = p.q.data_as<uint16_t>();
  const uint16_t* k = p.k.data_as<uint16_t>();
  const uint16_t* v = p.v.data_as<uint16_t>();
  uint16_t* o = p.o.data_as<uint16_t>();
  float* lse = p.lse.data_as<float>();
  const float scale_log2 = p.scale * 1.4426950408889634f;  // the CUDA launcher's constant
  constexpr float kLn2 = 0.69314718055994531f;

  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    const int64_t s0 = cu[b], len = cu[b + 1] - cu[b];
    if (len == 0) continue;
    const int64_t tiles = (len + kFp8AttnTile - 1) / kFp8AttnTile;
#pragma omp parallel for schedule(dynamic)
    for (int64_t head = 0; head < h; ++head) {
      std::vector<float> k8(static_cast<size_t>(len * hd)), v8(k8.size()), sk(tiles), sv(tiles);
      for (int64_t j = 0; j < tiles; ++j) {
        const int64_t r0 = j * kFp8AttnTile, n = std::min<int64_t>(kFp8AttnTile, len - r0);
        sk[j] = quantize_tile(k, h, hd, head, s0 + r0, n, k8.data() + r0 * hd);
        sv[j] = quantize_tile(v, h, hd, head, s0 + r0, n, v8.data() + r0 * hd);
      }
      std::vector<float> q8(hd), s(kFp8AttnTile), acc(hd);
      for (int64_t i = 0; i < len; ++i) {
        const float sq = quantize_tile(q, h, hd, head, s0 + i, 1, q8.data());
        const float cq = scale_log2 * sq;
        float m = -std::numeric_limits<float>::infinity(), l = 0.f, sv_o = 1.f;
        for (int64_t j = 0; j < tiles; ++j) {
          const int64_t r0 = j * kFp8AttnTile, n = std::min<int64_t>(kFp8AttnTile, len - r0);
          const float c = cq * sk[j];
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t r = 0; r < n; ++r) {
            float a = 0.f;
            for (int64_t d = 0; d < hd; ++d) a += q8[d] * k8[(r0 + r) * hd + d];
            s[r] = a;
            mx = std::max(mx, a);
          }
          const float m_new = std::max(m, mx * c);
          const float alpha = std::exp2(m - m_new), neg = kFp8AttnPLog2 - m_new;
          m = m_new;
          float sum = 0.f;
          if (j == 0) {
            std::fill(acc.begin(), acc.end(), 0.f);
          } else {
            const float f = alpha * (sv_o / sv[j]);  // O from sv_{j-1}'s units to sv_j's
            for (int64_t d = 0; d < hd; ++d) acc[d] *= f;
          }
          for (int64_t r = 0; r < n; ++r) {
            const float e = std::exp2(std::fmaf(s[r], c, neg));
            sum += e;
            const float p8 = e4m3_bits_to_f32(f32_to_e4m3_bits(e));
            for (int64_t d = 0; d < hd; ++d) acc[d] += p8 * v8[(r0 + r) * hd + d];
          }
          l = std::fmaf(l, alpha, sum);
          sv_o = sv[j];
        }
        const int64_t row = (s0 + i) * h + head;
        const float inv = sv_o / l;
        for (int64_t d = 0; d < hd; ++d) o[row * hd + d] = f32_to_bf16_bits(acc[d] * inv);
        lse[row] = (m + std::log2(l) - kFp8AttnPLog2) * kLn2;
      }
    }
  }
}

}  // namespace magi2::cpu
