// CPU ops of the Qwen3.5 text encoder against float64 references written here
// from their definitions (transformers modeling_qwen3_5.py semantics): the
// gated delta rule as the plain token-by-token recurrence (the op evaluates
// the chunked form), causal GQA attention as a direct softmax, and the
// element-wise ops with their bf16 rounding points. Every op is also checked
// bit-identical between 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "unit/ops_reference.h"

namespace magi2 {
namespace {

double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }
double softplus_ref(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }

double rms_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

// ---- gated delta rule --------------------------------------------------------

// o [L, Hv*dv] by the recurrence S_t = e^{g_t} S_{t-1} + k_t (beta_t (v_t - e^{g_t} S_{t-1}^T k_t))^T, o_t = S_t^T q_t.
std::vector<double> delta_rule_ref(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                                   const Tensor& a_log, const Tensor& dt_bias, int hk, int hv, bool bf16_beta) {
  const int64_t len = q.size(0), dk = q.size(1) / hk, dv = v.size(1) / hv;
  std::vector<double> o(static_cast<size_t>(len * hv * dv));
  for (int h = 0; h < hv; ++h) {
    const int kh = h / (hv / hk);
    std::vector<double> s(static_cast<size_t>(dk * dv), 0.0), qt(dk), kt(dk);
    for (int64_t t = 0; t < len; ++t) {
      double nq = 0, nk = 0;
      for (int64_t e = 0; e < dk; ++e) {
        qt[e] = at(q, t, kh * dk + e);
        kt[e] = at(k, t, kh * dk + e);
        nq += qt[e] * qt[e];
        nk += kt[e] * kt[e];
      }
      for (int64_t e = 0; e < dk; ++e) {
        qt[e] = qt[e] / std::sqrt(nq + 1e-6) / std::sqrt(static_cast<double>(dk));
        kt[e] = kt[e] / std::sqrt(nk + 1e-6);
      }
      double beta = sigmoid_ref(at(b, t, h));
      if (bf16_beta) beta = bf16_ref(beta);
      const double decay = std::exp(-std::exp(at(a_log, h)) * softplus_ref(at(a, t, h) + at(dt_bias, h)));
      for (double& x : s) x *= decay;
      for (int64_t d = 0; d < dv; ++d) {
        double mem = 0;
        for (int64_t e = 0; e < dk; ++e) mem += s[e * dv + d] * kt[e];
        const double delta = (at(v, t, h * dv + d) - mem) * beta;
        for (int64_t e = 0; e < dk; ++e) s[e * dv + d] += kt[e] * delta;
      }
      for (int64_t d = 0; d < dv; ++d) {
        double acc = 0;
        for (int64_t e = 0; e < dk; ++e) acc += s[e * dv + d] * qt[e];
        o[(t * hv + h) * dv + d] = acc;
      }
    }
  }
  return o;
}

TEST(OpsCpuText, GatedDeltaRuleChunkedMatchesRecurrence) {
  Rng g(21);
  const int hk = 2, hv = 6, dk = 16, dv = 8;
  const int64_t L = 150;  // 3 chunks of 64 (the last partial)
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor qkv = rand_t({L, 2 * hk * dk + hv * dv}, dt, g, -1, 1);  // the conv output, sliced as the model does
    Tensor q = qkv.slice_cols(0, hk * dk), k = qkv.slice_cols(hk * dk, 2 * hk * dk);
    Tensor v = qkv.slice_cols(2 * hk * dk, 2 * hk * dk + hv * dv);
    Tensor a = rand_t({L, hv}, dt, g, -3, 2), b = rand_t({L, hv}, dt, g, -3, 3);
    Tensor a_log = rand_t({hv}, DType::F32, g, -1, 1.5), dt_bias = rand_t({hv}, DType::F32, g, 0.5, 1.5);
    const auto ref = delta_rule_ref(q, k, v, a, b, a_log, dt_bias, hk, hv, dt == DType::BF16);
    const double scale = rms_of(ref);
    for (int chunk : {64, 16}) {
      auto outs = thread_invariant([&](Backend& be) {
        Tensor o = Tensor::zeros({L, hv * dv}, dt);
        be.gated_delta_rule({.q = q,
                             .k = k,
                             .v = v,
                             .a = a,
                             .b = b,
                             .a_log = a_log,
                             .dt_bias = dt_bias,
                             .o = o,
                             .num_k_heads = hk,
                             .num_v_heads = hv,
                             .chunk_size = chunk});
        return std::vector<Tensor>{o};
      });
      if (dt == DType::F32) {
        RelCheck c{"delta rule f32 chunk " + std::to_string(chunk), 2e-5};
        for (int64_t i = 0; i < L * hv * dv; ++i) c.add(at(outs[0], i), ref[i], scale);
        c.done();
      } else {
        UlpCheck c{"delta rule bf16 chunk " + std::to_string(chunk), 1};
        for (int64_t i = 0; i < L * hv * dv; ++i) c.add(at(outs[0], i), ref[i], 2e-5 * scale);
        c.done(0.9);
      }
    }
  }
}

// ---- causal GQA attention ------------------------------------------------------

TEST(OpsCpuText, CausalGqaAttentionAcrossKeyBlocks) {
  Rng g(22);
  const int64_t L = 600, h = 4, hkv = 2, hd = 8;  // 600 keys: two 512-key blocks for the late rows
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor q = rand_t({L, h * hd}, dt, g, -2, 2), k = rand_t({L, hkv * hd}, dt, g, -2, 2);
    Tensor v = rand_t({L, hkv * hd}, dt, g, -1, 1);
    auto outs = thread_invariant([&](Backend& be) {
      Tensor o = Tensor::zeros({L, h * hd}, dt);
      be.causal_attention({.q = q, .k = k, .v = v, .o = o, .heads = h, .kv_heads = hkv, .scale = scale});
      return std::vector<Tensor>{o};
    });
    UlpCheck cb{"causal attention bf16", 2};
    RelCheck cf{"causal attention f32", 1e-5};
    for (int64_t i = 0; i < L; ++i)
      for (int64_t qh = 0; qh < h; ++qh) {
        const int64_t kh = qh / (h / hkv);
        std::vector<double> s(static_cast<size_t>(i + 1));
        double mx = -kInf, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double d = 0;
          for (int64_t e = 0; e < hd; ++e) d += at(q, i, qh * hd + e) * at(k, j, kh * hd + e);
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t e = 0; e < hd; ++e) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) acc += s[j] / sum * at(v, j, kh * hd + e);
          const double out = at(outs[0], i, qh * hd + e);
          // bf16: the probabilities enter P V rounded to bf16 (relative 2^-9 each).
          if (dt == DType::BF16)
            cb.add(out, acc, std::ldexp(1.0, -9));
          else
            cf.add(out, acc, 1.0);
        }
      }
    if (dt == DType::BF16)
      cb.done(0.5);
    else
      cf.done();
  }
}

// ---- element-wise ops at their bf16 rounding points ------------------------------

TEST(OpsCpuText, CausalConv1dSilu) {
  Rng g(23);
  const int64_t L = 9, C = 12, K = 4;
  Tensor xw = rand_t({L, C + 4}, DType::BF16, g, -2, 2);
  Tensor x = xw.slice_cols(2, 2 + C);
  Tensor w = rand_t({C, K}, DType::BF16, g, -1, 1);
  auto outs = thread_invariant([&](Backend& be) {
    Tensor y = Tensor::zeros({L, C}, DType::BF16), z = Tensor::zeros({L, C}, DType::BF16);
    be.causal_conv1d({.x = x, .w = w, .y = y, .silu = true});
    be.causal_conv1d({.x = x, .w = w, .y = z, .silu = false});
    return std::vector<Tensor>{y, z};
  });
  UlpCheck cs{"causal_conv1d+silu bf16", 1}, cp{"causal_conv1d bf16", 1};
  for (int64_t t = 0; t < L; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < K; ++j)
        if (t - K + 1 + j >= 0) acc += at(w, c, j) * at(x, t - K + 1 + j, c);
      cp.add(at(outs[1], t, c), acc);
      cs.add(at(outs[0], t, c), silu_ref(bf16_ref(acc)));
    }
  cp.done(0.99);
  cs.done(0.99);
}

TEST(OpsCpuText, RotaryPartialBf16) {
  Rng g(24);
  const int64_t T = 40, H = 3, hd = 16, rot = 8;
  Tensor x0 = rand_t({T, H * hd}, DType::BF16, g, -2, 2);
  std::vector<float> inv(rot / 2);
  for (int i = 0; i < rot / 2; ++i) inv[i] = 1.0f / std::pow(1e7f, static_cast<float>(2 * i) / rot);
  Tensor inv_t = Tensor::from_f32({rot / 2}, inv);
  auto outs = thread_invariant([&](Backend& be) {
    Tensor x = x0.clone();
    be.rotary({.x = x, .inv_freq = inv_t, .heads = H, .rotary_dim = rot});
    return std::vector<Tensor>{x};
  });
  UlpCheck c{"rotary bf16", 1};
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < hd; ++d) {
        const int64_t col = h * hd + d;
        double ref = at(x0, t, col);  // pass-through dims
        if (d < rot) {
          const int64_t i = d % (rot / 2);
          const double ang = static_cast<float>(t) * inv[i];  // the angle is an fp32 product
          const double cs = bf16_ref(std::cos(ang)), sn = bf16_ref(std::sin(ang));
          const double x1 = at(x0, t, h * hd + i), x2 = at(x0, t, h * hd + i + rot / 2);
          ref = d < rot / 2 ? bf16_ref(x1 * cs) + bf16_ref(-x2 * sn) : bf16_ref(x2 * cs) + bf16_ref(x1 * sn);
        }
        c.add(at(outs[0], t, col), ref);
      }
  c.done(0.99);
}

TEST(OpsCpuText, GatedRmsNormAndGates) {
  Rng g(25);
  const int64_t R = 6, heads = 2, d = 16, C = heads * d;
  Tensor x = rand_t({R, C}, DType::BF16, g, -2, 2), z = rand_t({R, C}, DType::BF16, g, -3, 3);
  Tensor w = rand_t({d}, DType::F32, g, 0.5, 1.5);
  for (int64_t i = 0; i < d; ++i) put(w, 0, i, bf16_ref(at(w, i)));  // a bf16 parameter's values
  auto outs = thread_invariant([&](Backend& be) {
    Tensor y = Tensor::zeros({R, C}, DType::BF16), s = Tensor::zeros({R, C}, DType::BF16);
    Tensor m = Tensor::zeros({R, C}, DType::BF16), f = Tensor::zeros({R, C}, DType::F32);
    Tensor xf = x.to(DType::F32), af = Tensor::zeros({R, C}, DType::F32);
    be.gated_rms_norm({.x = x, .z = z, .w = w, .y = y, .heads = heads});
    be.sigmoid_mul({.x = x, .g = z, .out = s});
    be.silu_mul({.gate = z, .up = x, .out = m});
    be.sigmoid_mul({.x = xf, .g = z.to(DType::F32), .out = f});
    be.add({.a = xf, .b = f, .out = af});
    return std::vector<Tensor>{y, s, m, f, af};
  });
  UlpCheck cn{"gated_rms_norm bf16", 1}, cs{"sigmoid_mul bf16", 1}, cm{"silu_mul bf16", 1};
  RelCheck cf{"sigmoid_mul f32", 1e-6}, ca{"add f32", 6e-8};  // one fp32 rounding: 2^-24 of the terms
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t h0 = c / d * d;
      double ss = 0;
      for (int64_t i = 0; i < d; ++i) ss += at(x, r, h0 + i) * at(x, r, h0 + i);
      const double n = at(x, r, c) / std::sqrt(ss / d + 1e-6);
      cn.add(at(outs[0], r, c), bf16_ref(at(w, c % d) * bf16_ref(n)) * silu_ref(at(z, r, c)));
      const double sg = sigmoid_ref(at(z, r, c));
      cs.add(at(outs[1], r, c), at(x, r, c) * bf16_ref(sg));
      cm.add(at(outs[2], r, c), bf16_ref(silu_ref(at(z, r, c))) * at(x, r, c));
      cf.add(at(outs[3], r, c), at(x, r, c) * sg, std::fabs(at(x, r, c)));
      ca.add(at(outs[4], r, c), at(x, r, c) + at(outs[3], r, c), std::fabs(at(x, r, c)) + std::fabs(at(outs[3], r, c)));
    }
  cn.done(0.95);
  cs.done(0.99);
  cm.done(0.99);
  cf.done();
  ca.done();
}

TEST(OpsCpuText, BadShapesAreErrors) {
  auto be = make_cpu_backend(1);
  Tensor q = Tensor::zeros({4, 32}, DType::BF16), v = Tensor::zeros({4, 48}, DType::BF16);
  Tensor ab = Tensor::zeros({4, 5}, DType::BF16), s = Tensor::zeros({6}, DType::F32);
  EXPECT_TRUE(throws_with(
      [&] {
        be->gated_delta_rule({.q = q,
                              .k = q,
                              .v = v,
                              .a = ab,
                              .b = ab,
                              .a_log = s,
                              .dt_bias = s,
                              .o = Tensor::zeros({4, 48}, DType::BF16),
                              .num_k_heads = 2,
                              .num_v_heads = 5});
      },
      {"gated_delta_rule"}));
  EXPECT_TRUE(throws_with(
      [&] { be->causal_attention({.q = q, .k = q, .v = q, .o = q, .heads = 3, .kv_heads = 2, .scale = 1}); },
      {"causal_attention"}));
  EXPECT_TRUE(throws_with(
      [&] {
        be->causal_conv1d({.x = q, .w = Tensor::zeros({31, 4}, DType::BF16), .y = q});
      },
      {"causal_conv1d.w"}));
}

}  // namespace
}  // namespace magi2
