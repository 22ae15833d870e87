// Gated DeltaNet pieces of the Qwen3.5 linear-attention layers, as the
// transformers PyTorch fallbacks compute them (the official environment has
// neither flash-linear-attention nor causal-conv1d): the causal depthwise
// conv1d + SiLU, and the chunked gated delta rule with its beta/decay gates.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "ops/text_checks.h"
#include "ops/text_numerics.h"

namespace magi2::cpu {

void causal_conv1d(const CausalConv1dParams& p) {
  const Conv1dCausalDims dims = check_causal_conv1d(p, Device::CPU);
  const int64_t rows = dims.rows, ch = dims.channels, kk = dims.kernel;
  const DType dt = p.x.dtype();
  std::vector<float> w(static_cast<size_t>(ch * kk));
  load_row_f32(p.w.reshape({1, ch * kk}), 0, ch * kk, w.data());
  const bool bf = dt == DType::BF16;
#pragma omp parallel
  {
    std::vector<float> win(static_cast<size_t>(kk * ch)), out(ch);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < rows; ++t) {
      // win row k holds input row t - K + 1 + k (zeros before the start).
      for (int64_t k = 0; k < kk; ++k) {
        const int64_t src = t - kk + 1 + k;
        if (src < 0)
          std::fill_n(win.data() + k * ch, ch, 0.f);
        else
          load_row_f32(p.x, src, ch, win.data() + k * ch);
      }
      for (int64_t c = 0; c < ch; ++c) {
        float acc = 0.f;
        for (int64_t k = 0; k < kk; ++k) acc += w[c * kk + k] * win[k * ch + c];
        out[c] = conv1d_output(acc, p.silu, bf);
      }
      store_row(p.y, t, ch, out.data());
    }
  }
}

namespace {

// L2 normalisation as the transformers l2norm helper: x * rsqrt(sum x^2 + eps).
inline void l2normalize(float* x, int64_t n) {
  const float inv = 1.0f / std::sqrt(dot_f32(x, x, n) + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace

void gated_delta_rule(const GatedDeltaRuleParams& p) {
  const DeltaRuleDims dims = check_gated_delta_rule(p, Device::CPU);
  const int64_t len = dims.len, hk = dims.hk, hv = dims.hv, dk = dims.dk, dv = dims.dv;
  const DType dt = p.q.dtype();
  const bool bf = dt == DType::BF16;
  const int64_t cs = p.chunk_size, group = hv / hk;
  const float qscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
  const float* a_log = p.a_log.data_as<float>();
  const float* dt_bias = p.dt_bias.data_as<float>();

#pragma omp parallel
  {
    std::vector<float> q(cs * dk), k(cs * dk), v(cs * dv), beta(cs), g(cs), arow(hv), brow(hv);
    std::vector<float> a(cs * cs), u(cs * dv), w(cs * dk), vn(cs * dv), s(dk * dv), o(dv), kd(dk);
    std::vector<float> qrow(hk * dk), vrow(hv * dv);
#pragma omp for schedule(static)
    for (int64_t h = 0; h < hv; ++h) {
      const int64_t kh = h / group;
      const float neg_a = -std::exp(a_log[h]);
      std::fill(s.begin(), s.end(), 0.f);
      for (int64_t c0 = 0; c0 < len; c0 += cs) {
        const int64_t n = std::min(cs, len - c0);
        // Load the chunk: normalised q (scaled), k, v, beta and the cumulative log decay.
        float cum = 0.f;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t t = c0 + i;
          load_row_f32(p.q, t, hk * dk, qrow.data());
          std::copy_n(qrow.data() + kh * dk, dk, q.data() + i * dk);
          load_row_f32(p.k, t, hk * dk, qrow.data());
          std::copy_n(qrow.data() + kh * dk, dk, k.data() + i * dk);
          load_row_f32(p.v, t, hv * dv, vrow.data());
          std::copy_n(vrow.data() + h * dv, dv, v.data() + i * dv);
          load_row_f32(p.a, t, hv, arow.data());
          load_row_f32(p.b, t, hv, brow.data());
          l2normalize(q.data() + i * dk, dk);
          l2normalize(k.data() + i * dk, dk);
          for (int64_t d = 0; d < dk; ++d) q[i * dk + d] *= qscale;
          beta[i] = delta_beta(brow[h], bf);
          cum += delta_log_decay(arow[h], dt_bias[h], neg_a);
          g[i] = cum;
        }
        // UT transform: (I + A) U = V beta and (I + A) W = K beta exp(G), A strictly lower,
        // A_ij = beta_i (k_i . k_j) exp(G_i - G_j); forward substitution row by row.
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t d = 0; d < dk; ++d) kd[d] = k[i * dk + d] * beta[i];
          for (int64_t j = 0; j < i; ++j)
            a[i * cs + j] = dot_f32(kd.data(), k.data() + j * dk, dk) * std::exp(g[i] - g[j]);
          float* ui = u.data() + i * dv;
          float* wi = w.data() + i * dk;
          for (int64_t d = 0; d < dv; ++d) ui[d] = v[i * dv + d] * beta[i];
          const float eg = std::exp(g[i]);
          for (int64_t d = 0; d < dk; ++d) wi[d] = kd[d] * eg;
          for (int64_t j = 0; j < i; ++j) {
            const float aij = a[i * cs + j];
            for (int64_t d = 0; d < dv; ++d) ui[d] -= aij * u[j * dv + d];
            for (int64_t d = 0; d < dk; ++d) wi[d] -= aij * w[j * dk + d];
          }
        }
        // v_new = U - W S (the part of the values the carried state does not predict).
        for (int64_t i = 0; i < n; ++i) {
          float* vi = vn.data() + i * dv;
          std::copy_n(u.data() + i * dv, dv, vi);
          for (int64_t e = 0; e < dk; ++e) {
            const float we = w[i * dk + e];
            const float* se = s.data() + e * dv;
            for (int64_t d = 0; d < dv; ++d) vi[d] -= we * se[d];
          }
        }
        // Outputs: decayed read of the carried state plus the causal intra-chunk part.
        for (int64_t i = 0; i < n; ++i) {
          std::fill(o.begin(), o.end(), 0.f);
          const float eg = std::exp(g[i]);
          for (int64_t e = 0; e < dk; ++e) {
            const float qe = q[i * dk + e] * eg;
            const float* se = s.data() + e * dv;
            for (int64_t d = 0; d < dv; ++d) o[d] += qe * se[d];
          }
          for (int64_t j = 0; j <= i; ++j) {
            const float aij = dot_f32(q.data() + i * dk, k.data() + j * dk, dk) * std::exp(g[i] - g[j]);
            const float* vj = vn.data() + j * dv;
            for (int64_t d = 0; d < dv; ++d) o[d] += aij * vj[d];
          }
          const int64_t t = c0 + i;
          if (bf) {
            uint16_t* dst = reinterpret_cast<uint16_t*>(row_ptr(p.o, t)) + h * dv;
            for (int64_t d = 0; d < dv; ++d) dst[d] = f32_to_bf16_bits(o[d]);
          } else {
            float* dst = reinterpret_cast<float*>(row_ptr(p.o, t)) + h * dv;
            std::copy_n(o.data(), dv, dst);
          }
        }
        // Carry the state to the next chunk.
        const float glast = g[n - 1], elast = std::exp(glast);
        for (float& x : s) x *= elast;
        for (int64_t j = 0; j < n; ++j) {
          const float dj = std::exp(glast - g[j]);
          const float* vj = vn.data() + j * dv;
          for (int64_t e = 0; e < dk; ++e) {
            const float ke = k[j * dk + e] * dj;
            float* se = s.data() + e * dv;
            for (int64_t d = 0; d < dv; ++d) se[d] += ke * vj[d];
          }
        }
      }
    }
  }
}

}  // namespace magi2::cpu
