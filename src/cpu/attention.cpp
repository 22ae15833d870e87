// Varlen full attention with a learned sink logit per head (spec magi2-dit.md
// §6 step 7, §6.1). Rounding as the official path (FA3 + sink correction):
// o_fa = bf16(softmax(s q k^T) v) with fp32 softmax and fp32 P V, lse = its fp32
// log-sum-exp, then o = bf16(o_fa * exp(lse - logaddexp(lse, sink))).
//
// Speed: a 10 s 272p clip packs ~14.6k tokens per CFG branch, so the score
// matrix dominates the CPU step. Scores are computed in register tiles of
// kTileQ queries x kTileK keys over a transposed K, the exponentials with a
// branch-free polynomial the compiler vectorises, and P V in kTileQ-query
// tiles. The hot loops are compiled for AVX-512, AVX2 and baseline x86-64
// (target_clones); every element follows the same operation sequence in all
// of them (no FMA contraction, fixed summation order), so the bytes do not
// depend on the CPU, the thread count or the tile edges.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/attn_tiles.h"
#include "cpu/cpu_ops.h"

namespace magi2::cpu {

namespace {
constexpr int kBlockQ = 16; // queries sharing one score buffer
}  // namespace

/// e^x for x <= 0 (softmax after the max shift), within ~2 ulp of expf:
/// Cody-Waite reduction by ln 2 and the Cephes degree-6 polynomial; x below
/// -87 (result under 2^-125) gives 0. Plain float ops only, so it vectorises.
float exp_nonpositive(float x) {
  const float xc = std::max(x, -87.0f);
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : p * scale;
}

/// s[i][j] = scale * sum_d q[i][d] kt[d][j] (d ascending) for nq <= kTileQ
/// queries and nk <= kTileK keys; kt is [hd][ld] (transposed K of one head).
MAGI2_CPU_CLONES
void score_tile(const float* q, int64_t hd, const float* kt, int64_t ld, int nq, int nk, float scale,
                float* s, int64_t lds) {
  float acc[kTileQ][kTileK] = {};
  if (nq == kTileQ && nk == kTileK) {
    for (int64_t d = 0; d < hd; ++d) {
      const float* kr = kt + d * ld;
      for (int i = 0; i < kTileQ; ++i) {
        const float qv = q[i * hd + d];
        for (int j = 0; j < kTileK; ++j) acc[i][j] += qv * kr[j];
      }
    }
  } else {
    for (int64_t d = 0; d < hd; ++d) {
      const float* kr = kt + d * ld;
      for (int i = 0; i < nq; ++i) {
        const float qv = q[i * hd + d];
        for (int j = 0; j < nk; ++j) acc[i][j] += qv * kr[j];
      }
    }
  }
  for (int i = 0; i < nq; ++i)
    for (int j = 0; j < nk; ++j) s[i * lds + j] = acc[i][j] * scale;
}

/// Row softmax numerator in place: s[j] = e^(s[j] - max); returns the max and
/// the sum (16 interleaved partial sums, then a fixed tree).
MAGI2_CPU_CLONES
void exp_row(float* s, int64_t n, float* row_max, float* row_sum) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
  for (int64_t j = 0; j < n; ++j) s[j] = exp_nonpositive(s[j] - mx);
  float acc[16] = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) acc[l] += s[j + l];
  for (int l = 0; j < n; ++j, ++l) acc[l] += s[j];
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  *row_max = mx;
  *row_sum = acc[0];
}

/// acc[i][d] = sum_j p[i][j] v[j][d] (j ascending) for nq <= kTileQ queries.
MAGI2_CPU_CLONES
void pv_tile(const float* p, int64_t ldp, const float* v, int64_t len, int64_t hd, int nq, float* acc) {
  std::fill(acc, acc + kTileQ * hd, 0.0f);
  for (int64_t j = 0; j < len; ++j) {
    const float* vr = v + j * hd;
    for (int i = 0; i < nq; ++i) {
      const float pv = p[i * ldp + j];
      float* a = acc + i * hd;
      for (int64_t d = 0; d < hd; ++d) a[d] += pv * vr[d];
    }
  }
}

std::vector<int32_t> check_attention(const AttentionParams& p) {
  MAGI2_CHECK(p.cu_seqlens.defined() && p.cu_seqlens.numel() >= 2, "attention: cu_seqlens is missing");
  const int32_t* cu_data = check_index_on(Device::CPU, p.cu_seqlens, p.cu_seqlens.numel(), "attention.cu_seqlens");
  const std::vector<int32_t> cu(cu_data, cu_data + p.cu_seqlens.numel());
  for (const Tensor* x : {&p.q, &p.k, &p.v, &p.o})
    MAGI2_CHECK(x->dim() == 3 && x->is_contiguous() && x->dtype() == DType::BF16 && x->shape() == p.q.shape(),
                "attention: q, k, v, o must be contiguous bf16 of one shape [T, H, hd], got ",
                shape_str(x->shape()));
  const int64_t t = p.q.size(0), h = p.q.size(1);
  MAGI2_CHECK(cu.front() == 0 && cu.back() == t, "attention: cu_seqlens must span [0, ", t, "]");
  for (size_t i = 1; i < cu.size(); ++i) MAGI2_CHECK(cu[i] >= cu[i - 1], "attention: cu_seqlens not sorted");
  MAGI2_CHECK(p.lse.defined() || (p.sinks.dtype() == DType::F32 && p.sinks.numel() >= p.head_begin + h),
              "attention.sinks: expected at least ", p.head_begin + h, " f32 values");
  if (p.lse.defined())
    MAGI2_CHECK(p.lse.device() == Device::CPU && p.lse.dtype() == DType::F32 && p.lse.is_contiguous() &&
                    p.lse.numel() == t * h,
                "attention.lse: expected contiguous f32 [", t, ", ", h, "], got ", shape_str(p.lse.shape()));
  return cu;
}

void attention(const AttentionParams& p) {
  if (p.fp8) return attention_fp8(p);
  const std::vector<int32_t> cu = check_attention(p);
  const int64_t h = p.q.size(1), hd = p.q.size(2);
  float* lse_out = p.lse.defined() ? p.lse.data_as<float>() : nullptr;
  const float* sinks = p.sinks.data_as<float>();
  const uint16_t* q = p.q.data_as<uint16_t>();
  const uint16_t* k = p.k.data_as<uint16_t>();
  const uint16_t* v = p.v.data_as<uint16_t>();
  uint16_t* o = p.o.data_as<uint16_t>();
  const int64_t nseq = static_cast<int64_t>(cu.size()) - 1;

  for (int64_t b = 0; b < nseq; ++b) {
    const int64_t s0 = cu[b], len = cu[b + 1] - cu[b];
    if (len == 0) continue;
    // Widen once per sample: K transposed per head [H][hd][len], V [H][len][hd].
    std::vector<float> kt(static_cast<size_t>(h * len * hd)), vf(kt.size());
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < len; ++j)
      for (int64_t kh = 0; kh < h; ++kh)
        for (int64_t d = 0; d < hd; ++d) {
          const int64_t src = ((s0 + j) * h + kh) * hd + d;
          kt[(kh * hd + d) * len + j] = bf16_bits_to_f32(k[src]);
          vf[(kh * len + j) * hd + d] = bf16_bits_to_f32(v[src]);
        }
    const int64_t nblocks = (len + kBlockQ - 1) / kBlockQ;
#pragma omp parallel
    {
      std::vector<float> s(static_cast<size_t>(kBlockQ * len)), qf(kBlockQ * hd), acc(kTileQ * hd);
      float mx[kBlockQ], sum[kBlockQ];
#pragma omp for collapse(2) schedule(static)
      for (int64_t kh = 0; kh < h; ++kh)
        for (int64_t blk = 0; blk < nblocks; ++blk) {
          const int64_t i0 = blk * kBlockQ;
          const int nq = static_cast<int>(std::min<int64_t>(kBlockQ, len - i0));
          for (int i = 0; i < nq; ++i)
            for (int64_t d = 0; d < hd; ++d) qf[i * hd + d] = bf16_bits_to_f32(q[((s0 + i0 + i) * h + kh) * hd + d]);
          const float* ktk = kt.data() + kh * hd * len;
          for (int it = 0; it < nq; it += kTileQ)
            for (int64_t j0 = 0; j0 < len; j0 += kTileK)
              score_tile(qf.data() + it * hd, hd, ktk + j0, len, std::min(kTileQ, nq - it),
                         static_cast<int>(std::min<int64_t>(kTileK, len - j0)), p.scale,
                         s.data() + it * len + j0, len);
          for (int i = 0; i < nq; ++i) exp_row(s.data() + i * len, len, &mx[i], &sum[i]);
          const float sink = lse_out ? 0.f : sinks[p.head_begin + kh];
          for (int it = 0; it < nq; it += kTileQ) {
            const int nt = std::min(kTileQ, nq - it);
            pv_tile(s.data() + it * len, len, vf.data() + kh * len * hd, len, hd, nt, acc.data());
            for (int i = 0; i < nt; ++i) {
              const int qi = it + i;
              const float lse = mx[qi] + std::log(sum[qi]);
              const int64_t row = (s0 + i0 + qi) * h + kh;
              uint16_t* orow = o + row * hd;
              if (lse_out) {  // deferred sink: attn_out applies the factor to these bytes
                lse_out[row] = lse;
                for (int64_t d = 0; d < hd; ++d) orow[d] = f32_to_bf16_bits(acc[i * hd + d] / sum[qi]);
                continue;
              }
              const float factor = sink_factor(lse, sink);
              for (int64_t d = 0; d < hd; ++d) orow[d] = f32_to_bf16_bits(round_bf16(acc[i * hd + d] / sum[qi]) * factor);
            }
          }
        }
    }
  }
}

}  // namespace magi2::cpu
