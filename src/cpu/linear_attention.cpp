// Gated DeltaNet pieces of the Qwen3.5 linear-attention layers, as the
// transformers PyTorch fallbacks compute them (the official environment has
// neither flash-linear-attention nor causal-conv1d): the causal depthwise
// conv1d + SiLU, and the chunked gated delta rule with its beta/decay gates.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"

namespace magi2::cpu {

void causal_conv1d(const CausalConv1dParams& p) {
  const int64_t rows = p.x.size(0), ch = p.x.size(1);
  check_2d(p.x, rows, ch, "causal_conv1d.x");
  check_2d(p.y, rows, ch, "causal_conv1d.y");
  const DType dt = p.x.dtype();
  MAGI2_CHECK((dt == DType::BF16 || dt == DType::F32) && p.y.dtype() == dt && p.w.dtype() == dt,
              "causal_conv1d: x, w and y must be all bf16 or all f32");
  MAGI2_CHECK(p.w.is_contiguous() && p.w.dim() == 2 && p.w.size(0) == ch, "causal_conv1d.w: expected [", ch,
              ", K], got ", shape_str(p.w.shape()));
  const int64_t kk = p.w.size(1);
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
        if (p.silu) {
          if (bf) acc = round_bf16(acc);  // conv output is a bf16 tensor before the SiLU
          acc = acc / (1.0f + std::exp(-acc));
        }
        out[c] = acc;
      }
      store_row(p.y, t, ch, out.data());
    }
  }
}

namespace {

inline float softplus_f32(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// L2 normalisation as the transformers l2norm helper: x * rsqrt(sum x^2 + eps).
inline void l2normalize(float* x, int64_t n) {
  const float inv = 1.0f / std::sqrt(dot_f32(x, x, n) + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace

void gated_delta_rule(const GatedDeltaRuleParams& p) {
  const int64_t len = p.q.size(0), hk = p.num_k_heads, hv = p.num_v_heads;
  MAGI2_CHECK(hk >= 1 && hv >= 1 && hv % hk == 0, "gated_delta_rule: ", hv, " value heads do not group over ", hk,
              " key heads");
  MAGI2_CHECK(p.q.dim() == 2 && p.q.size(1) % hk == 0 && p.v.dim() == 2 && p.v.size(1) % hv == 0,
              "gated_delta_rule: q/v widths do not split into heads");
  const int64_t dk = p.q.size(1) / hk, dv = p.v.size(1) / hv;
  check_2d(p.q, len, hk * dk, "gated_delta_rule.q");
  check_2d(p.k, len, hk * dk, "gated_delta_rule.k");
  check_2d(p.v, len, hv * dv, "gated_delta_rule.v");
  check_2d(p.a, len, hv, "gated_delta_rule.a");
  check_2d(p.b, len, hv, "gated_delta_rule.b");
  check_2d(p.o, len, hv * dv, "gated_delta_rule.o");
  const DType dt = p.q.dtype();
  for (const Tensor* x : {&p.k, &p.v, &p.a, &p.b, &p.o})
    MAGI2_CHECK(x->dtype() == dt && (dt == DType::BF16 || dt == DType::F32),
                "gated_delta_rule: q, k, v, a, b, o must be all bf16 or all f32");
  for (const Tensor* x : {&p.a_log, &p.dt_bias})
    MAGI2_CHECK(x->dtype() == DType::F32 && x->numel() == hv, "gated_delta_rule: A_log/dt_bias need ", hv,
                " f32 values");
  MAGI2_CHECK(p.chunk_size >= 1, "gated_delta_rule: chunk_size must be >= 1");
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
          const float bt = sigmoid_f32(brow[h]);
          beta[i] = bf ? round_bf16(bt) : bt;
          cum += neg_a * softplus_f32(arow[h] + dt_bias[h]);
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
