// Varlen full attention with a learned sink logit per head (spec magi2-dit.md
// §6 step 7, §6.1). Rounding as the official path (FA3 + sink correction):
// o_fa = bf16(softmax(s q k^T) v) with fp32 softmax and fp32 P V, lse = its fp32
// log-sum-exp, then o = bf16(o_fa * exp(lse - logaddexp(lse, sink))).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"

namespace magi2::cpu {

void attention(const AttentionParams& p) {
  MAGI2_CHECK(p.cu_seqlens != nullptr && p.cu_seqlens->size() >= 2, "attention: cu_seqlens is missing");
  const auto& cu = *p.cu_seqlens;
  for (const Tensor* x : {&p.q, &p.k, &p.v, &p.o})
    MAGI2_CHECK(x->dim() == 3 && x->is_contiguous() && x->dtype() == DType::BF16 && x->shape() == p.q.shape(),
                "attention: q, k, v, o must be contiguous bf16 of one shape [T, H, hd], got ",
                shape_str(x->shape()));
  const int64_t t = p.q.size(0), h = p.q.size(1), hd = p.q.size(2);
  MAGI2_CHECK(cu.front() == 0 && cu.back() == t, "attention: cu_seqlens must span [0, ", t, "]");
  for (size_t i = 1; i < cu.size(); ++i) MAGI2_CHECK(cu[i] >= cu[i - 1], "attention: cu_seqlens not sorted");
  MAGI2_CHECK(p.sinks.dtype() == DType::F32 && p.sinks.numel() >= p.head_begin + h,
              "attention.sinks: expected at least ", p.head_begin + h, " f32 values");
  const float* sinks = p.sinks.data_as<float>();
  const uint16_t* q = p.q.data_as<uint16_t>();
  const uint16_t* k = p.k.data_as<uint16_t>();
  const uint16_t* v = p.v.data_as<uint16_t>();
  uint16_t* o = p.o.data_as<uint16_t>();
  const int64_t nseq = static_cast<int64_t>(cu.size()) - 1;
  int64_t max_len = 0;
  for (int64_t b = 0; b < nseq; ++b) max_len = std::max<int64_t>(max_len, cu[b + 1] - cu[b]);

  for (int64_t b = 0; b < nseq; ++b) {
    const int64_t s0 = cu[b], len = cu[b + 1] - cu[b];
    if (len == 0) continue;
    // Widen K and V of this sample once per head: [H][len][hd] fp32.
    std::vector<float> kf(static_cast<size_t>(h * len * hd)), vf(kf.size());
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < len; ++j)
      for (int64_t kh = 0; kh < h; ++kh)
        for (int64_t d = 0; d < hd; ++d) {
          const int64_t src = ((s0 + j) * h + kh) * hd + d;
          kf[(kh * len + j) * hd + d] = bf16_bits_to_f32(k[src]);
          vf[(kh * len + j) * hd + d] = bf16_bits_to_f32(v[src]);
        }
#pragma omp parallel
    {
      std::vector<float> z(len), qf(hd), acc(hd);
#pragma omp for collapse(2) schedule(static)
      for (int64_t i = 0; i < len; ++i)
        for (int64_t kh = 0; kh < h; ++kh) {
          const int64_t row = (s0 + i) * h + kh;
          for (int64_t d = 0; d < hd; ++d) qf[d] = bf16_bits_to_f32(q[row * hd + d]);
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < len; ++j) {
            z[j] = dot_f32(qf.data(), kf.data() + (kh * len + j) * hd, hd) * p.scale;
            mx = std::max(mx, z[j]);
          }
          float sum = 0.f;
          for (int64_t j = 0; j < len; ++j) {
            z[j] = std::exp(z[j] - mx);
            sum += z[j];
          }
          std::fill(acc.begin(), acc.end(), 0.f);
          for (int64_t j = 0; j < len; ++j) {
            const float pj = z[j] / sum;
            const float* vj = vf.data() + (kh * len + j) * hd;
            for (int64_t d = 0; d < hd; ++d) acc[d] += pj * vj[d];
          }
          const float lse = mx + std::log(sum);
          const float sink = sinks[p.head_begin + kh];
          const float hi = std::max(lse, sink), lo = std::min(lse, sink);
          const float lse_new = hi + std::log1p(std::exp(lo - hi));
          const float factor = std::exp(lse - lse_new);
          for (int64_t d = 0; d < hd; ++d) o[row * hd + d] = f32_to_bf16_bits(round_bf16(acc[d]) * factor);
        }
    }
  }
}

}  // namespace magi2::cpu
