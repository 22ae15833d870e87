// CPU backend mHC (§9) and multi-head MoE (§8) ops against float64 references
// written here from spec magi2-dit.md; see test_ops_cpu.cpp for the others and
// for the conventions (bf16 ulps of the unrounded reference, "exact" = equal to
// bf16(ref), fp32 accumulation allowances).
//
// Intended rounding points that deliberately follow the official code, not
// the spec's R0 column (docstrings in src/cpu/mhc.cpp, moe.cpp): hyper-connect
// rounds once; routed experts keep G/U and Y in fp32, round Z and each route's
// weighted output to bf16, and combine routes in fp32 in ascending expert id
// with one final rounding. Each of these is checked against its R0 alternative
// too, which must match clearly fewer outputs.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/numerics.h"
#include "ops/ops.h"
#include "unit/ops_reference.h"

namespace magi2 {
namespace {

double swiglu7_ref(double gv, double lv) {
  const double gp = std::isnan(gv) ? gv : std::min(gv, 7.0);
  const double lp = std::isnan(lv) ? lv : std::min(std::max(lv, -7.0), 7.0);
  return gp * sigmoid_ref(1.702 * gp) * (lp + 1.0);
}

// ---- mHC (§9) ---------------------------------------------------------------

MhcBranchWeights make_branch(Rng& g) {
  MhcBranchWeights w;
  w.alpha_pre = Tensor::from_f32({1}, {0.9f});
  w.alpha_post = Tensor::from_f32({1}, {1.1f});
  w.alpha_res = Tensor::from_f32({1}, {0.8f});
  w.bias_pre = rand_t({4}, DType::F32, g, -1, 1);
  w.bias_post = rand_t({4}, DType::F32, g, -1, 1);
  w.bias_res = rand_t({4, 4}, DType::F32, g, -1, 1);
  for (int i = 0; i < 4; ++i) put(w.bias_res, i, i, at(w.bias_res, i, i) + 1.0);
  return w;
}

TEST(OpsCpuMhc, LogitsNormThenPhi) {
  Rng g(31);
  const int64_t T = 5, VW = 24;
  const Groups grp{.cu = {0, 2, 2, T}, .count = 3};
  Tensor sb = rand_t({T, VW + 3}, DType::BF16, g, -3, 3), state = sb.slice_cols(1, 1 + VW);
  Tensor nw = rand_t({3 * VW}, DType::F32, g, -0.5, 0.5);
  Tensor phi = rand_t({VW, 24}, DType::F32, g, -1, 1);
  auto outs = thread_invariant([&](Backend& be) {
    Tensor lb = Tensor::zeros({T, 26}, DType::F32);
    be.mhc_logits({.state = state, .norm_w = nw, .phi = phi, .logits = lb.slice_cols(1, 25), .groups = grp});
    return std::vector<Tensor>{lb};
  });
  const Tensor logits = outs[0].slice_cols(1, 25);
  RelCheck ck{"mhc_logits", 1e-5};
  for (int64_t r = 0; r < T; ++r) {
    double ss = 0;
    for (int64_t k = 0; k < VW; ++k) ss += at(state, r, k) * at(state, r, k);
    const double rs = 1.0 / std::sqrt(ss / VW + static_cast<double>(1e-6f));
    std::vector<double> n(VW);
    for (int64_t k = 0; k < VW; ++k) n[k] = at(state, r, k) * rs * (at(nw, group_of_row(grp, r) * VW + k) + 1.0);
    for (int64_t c = 0; c < 24; ++c) {
      double s = 0, sa = 0;
      for (int64_t k = 0; k < VW; ++k) s += n[k] * at(phi, k, c), sa += std::fabs(n[k] * at(phi, k, c));
      ck.add(at(logits, r, c), s, sa);
    }
  }
  ck.done();
  auto be = make_cpu_backend(1);
  EXPECT_TRUE(throws_with([&] {
    be->mhc_logits({.state = state, .norm_w = nw, .phi = Tensor::zeros({VW, 23}, DType::F32), .logits = logits,
                    .groups = grp});
  }, {"mhc phi"}));
}

TEST(OpsCpuMhc, PreRoundsHToBf16) {
  Rng g(32);
  const int64_t T = 6, D = 8, VW = 4 * D;
  const float c = static_cast<float>(1.0 / std::sqrt(double(VW)));
  Tensor sb = rand_t({T, VW + 2}, DType::BF16, g, -3, 3), state = sb.slice_cols(2, 2 + VW);
  Tensor logits = rand_t({T, 24}, DType::F32, g, -30, 30);
  const MhcBranchWeights w = make_branch(g);
  auto outs = thread_invariant([&](Backend& be) {
    Tensor ab = Tensor::zeros({T, D + 3}, DType::BF16), hp = Tensor::zeros({T, 4}, DType::F32);
    be.mhc_pre({.state = state, .logits = logits, .w = &w, .a = ab.slice_cols(3, 3 + D), .h_pre = hp, .c = c});
    return std::vector<Tensor>{ab, hp};
  });
  const Tensor a = outs[0].slice_cols(3, 3 + D);
  const double ac = at(w.alpha_pre, 0) * static_cast<double>(c);
  UlpCheck ch{"mhc_pre H_pre", 1}, ca{"mhc_pre a", 1};
  int64_t alt_exact = 0;
  for (int64_t r = 0; r < T; ++r) {
    double h[4];
    for (int i = 0; i < 4; ++i) {
      h[i] = sigmoid_ref(ac * at(logits, r, i) + at(w.bias_pre, i));
      ch.add(at(outs[1], r, i), h[i]);
    }
    for (int64_t col = 0; col < D; ++col) {
      double s = 0, sa = 0, unrounded = 0;
      for (int i = 0; i < 4; ++i) {
        s += bf16_ref(h[i]) * at(state, r, i * D + col);
        sa += std::fabs(bf16_ref(h[i]) * at(state, r, i * D + col));
        unrounded += h[i] * at(state, r, i * D + col);
      }
      ca.add(at(a, r, col), s, 4 * std::ldexp(sa, -24));
      alt_exact += at(a, r, col) == bf16_ref(unrounded);
    }
  }
  ch.done(1.0), ca.done(0.99);
  std::printf("[ %-28s] exact vs unrounded-H alternative %lld/%lld\n", "mhc_pre a",
              static_cast<long long>(alt_exact), static_cast<long long>(ca.n));
  EXPECT_LT(alt_exact, ca.n - ca.n / 20);
  auto be = make_cpu_backend(1);
  EXPECT_TRUE(throws_with([&] {
    be->mhc_pre({.state = state, .logits = logits, .w = &w, .a = Tensor::zeros({T, D + 1}, DType::BF16),
                 .h_pre = {}, .c = c});
  }, {"mhc_pre.a"}));
  EXPECT_TRUE(throws_with([&] {
    be->mhc_pre({.state = Tensor::zeros({T, VW}, DType::F32), .logits = logits, .w = &w, .a = a, .h_pre = {},
                 .c = c});
  }, {"mhc_pre", "state"}));
}

// mhc_pre with the branch's pre-norm (MhcPreParams::norm): the bytes of mhc_pre then rms_norm, with a kept
// or omitted; without a or norm.y it names the missing rows.
TEST(OpsCpuMhc, PreWithPreNormIsPreThenNorm) {
  Rng g(33);
  const int64_t T = 9, D = 256, VW = 4 * D;
  const float c = static_cast<float>(1.0 / std::sqrt(double(VW)));
  const Tensor state = rand_t({T, VW}, DType::BF16, g, -3, 3), logits = rand_t({T, 24}, DType::F32, g, -30, 30);
  const Tensor nw = rand_t({3 * D}, DType::F32, g, -0.2, 0.2);
  Groups grp = Groups::single(T);
  grp.cu = {0, 3, 7, T}, grp.count = 3;
  const MhcBranchWeights w = make_branch(g);
  auto be = make_cpu_backend(2);
  const auto rows8 = [&] {
    return Fp8Rows{Tensor::zeros({T, D}, DType::F8E4M3), Tensor::zeros({T, D / kFp8ActGroup}, DType::F32)};
  };
  Tensor a = Tensor::zeros({T, D}, DType::BF16), y = Tensor::zeros({T, D}, DType::BF16);
  const Fp8Rows y8 = rows8();
  be->mhc_pre({.state = state, .logits = logits, .w = &w, .a = a, .c = c});
  be->rms_norm({.x = a, .w = nw, .y = y, .groups = grp, .y8 = y8});
  for (const bool keep_a : {true, false}) {
    Tensor a2 = keep_a ? Tensor::zeros({T, D}, DType::BF16) : Tensor(), y2 = Tensor::zeros({T, D}, DType::BF16);
    const Fp8Rows y28 = rows8();
    be->mhc_pre({.state = state, .logits = logits, .w = &w, .a = a2, .c = c,
                 .norm = {.w = nw, .y = y2, .groups = grp, .y8 = y28}});
    if (keep_a) {
      EXPECT_EQ(std::memcmp(a2.data(), a.data(), a.nbytes()), 0);
    }
    EXPECT_EQ(std::memcmp(y2.data(), y.data(), y.nbytes()), 0);
    EXPECT_EQ(std::memcmp(y28.q.data(), y8.q.data(), y8.q.nbytes()), 0);
    EXPECT_EQ(std::memcmp(y28.scale.data(), y8.scale.data(), y8.scale.nbytes()), 0);
  }
  EXPECT_TRUE(throws_with([&] { be->mhc_pre({.state = state, .logits = logits, .w = &w, .c = c}); },
                          {"mhc_pre.a", "missing"}));
}

// mhc_post_res with the next branch's logits (MhcPostResParams::next) is mhc_post_res, then mhc_logits of
// the new state, bit for bit; next.logits may be the logits the update reads (how the DiT calls it); a bad
// next is rejected before the state changes.
TEST(OpsCpuMhc, PostResWithNextLogitsIsPostThenLogits) {
  Rng g(34);
  const int64_t T = 7, D = 64, VW = 4 * D;
  const float c = static_cast<float>(1.0 / std::sqrt(double(VW)));
  const Tensor state = rand_t({T, VW}, DType::BF16, g, -3, 3), o = rand_t({T, D}, DType::BF16, g, -3, 3);
  const Tensor logits = rand_t({T, 24}, DType::F32, g, -30, 30);
  const Tensor nw = rand_t({3 * VW}, DType::F32, g, -0.2, 0.2), phi = rand_t({VW, 24}, DType::F32, g, -1, 1);
  Groups grp = Groups::single(T);
  grp.cu = {0, 2, 5, T}, grp.count = 3;
  const MhcBranchWeights w = make_branch(g);
  auto be = make_cpu_backend(2);
  Tensor s1 = state.clone(), l1 = Tensor::zeros({T, 24}, DType::F32);
  be->mhc_post_res({.state = s1, .o = o, .logits = logits, .w = &w, .c = c});
  be->mhc_logits({.state = s1, .norm_w = nw, .phi = phi, .logits = l1, .groups = grp});
  for (const bool alias : {false, true}) {
    Tensor s2 = state.clone(), lin = logits.clone(), l2 = alias ? lin : Tensor::zeros({T, 24}, DType::F32);
    be->mhc_post_res({.state = s2, .o = o, .logits = lin, .w = &w, .c = c,
                      .next = {.norm_w = nw, .phi = phi, .logits = l2, .groups = grp}});
    EXPECT_EQ(std::memcmp(s2.data(), s1.data(), s1.nbytes()), 0) << "alias " << alias;
    EXPECT_EQ(std::memcmp(l2.data(), l1.data(), l1.nbytes()), 0) << "alias " << alias;
  }
  Tensor s3 = state.clone();
  EXPECT_TRUE(throws_with([&] {
    be->mhc_post_res({.state = s3, .o = o, .logits = logits, .w = &w, .c = c,
                      .next = {.norm_w = nw, .phi = phi, .logits = Tensor::zeros({T, 23}, DType::F32), .groups = grp}});
  }, {"mhc_post_res.next.logits"}));
  EXPECT_TRUE(throws_with([&] {
    be->mhc_post_res({.state = s3, .o = o, .logits = logits, .w = &w, .c = c,
                      .next = {.norm_w = nw, .phi = Tensor::zeros({VW, 23}, DType::F32),
                               .logits = Tensor::zeros({T, 24}, DType::F32), .groups = grp}});
  }, {"mhc_post_res.next.phi"}));
  EXPECT_EQ(std::memcmp(s3.data(), state.data(), state.nbytes()), 0) << "a rejected call changed the state";
}

void sinkhorn_ref(double m[4][4], int iters, double eps) {
  for (int it = 0; it < iters; ++it) {
    for (int j = 0; j < 4; ++j) {
      const double s = m[0][j] + m[1][j] + m[2][j] + m[3][j];
      for (int i = 0; i < 4; ++i) m[i][j] /= s + eps;
    }
    for (int i = 0; i < 4; ++i) {
      const double s = m[i][0] + m[i][1] + m[i][2] + m[i][3];
      for (int j = 0; j < 4; ++j) m[i][j] /= s + eps;
    }
  }
}

TEST(OpsCpuMhc, PostResSinkhornAndHyperConnect) {
  Rng g(33);
  const int64_t T = 6, D = 8, VW = 4 * D;
  const float c = static_cast<float>(1.0 / std::sqrt(double(VW)));
  Tensor sb = rand_t({T, VW + 2}, DType::BF16, g, -3, 3);
  Tensor ob = rand_t({T, D + 1}, DType::BF16, g, -3, 3), o = ob.slice_cols(1, 1 + D);
  Tensor logits = rand_t({T, 24}, DType::F32, g, -30, 30);
  put(logits, T - 1, 8 + 5, kNaN);  // one NaN residual logit poisons the whole H_res (amax propagates NaN)
  const MhcBranchWeights w = make_branch(g);
  auto outs = thread_invariant([&](Backend& be) {
    Tensor s = sb.clone(), hp = Tensor::zeros({T, 4}, DType::F32), hr = Tensor::zeros({T, 16}, DType::F32);
    Tensor ss = Tensor::zeros({T}, DType::F32);
    be.mhc_post_res({.state = s.slice_cols(2, 2 + VW), .o = o, .logits = logits, .w = &w, .h_post = hp,
                     .h_res = hr, .c = c, .ss = ss});
    return std::vector<Tensor>{s, hp, hr, ss};
  });
  // ss: the sum of squares of each new state row (the next logits' RMSNorm input; NaN rows stay NaN).
  for (int64_t r = 0; r < T; ++r) {
    double want = 0;
    for (int64_t col = 0; col < VW; ++col) want += at(outs[0], r, 2 + col) * at(outs[0], r, 2 + col);
    const double got = at(outs[3], r);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "ss of token " << r;
    } else {
      EXPECT_NEAR(got, want, 1e-6 * want) << "ss of token " << r;
    }
  }
  const Tensor old = sb.slice_cols(2, 2 + VW), st = outs[0].slice_cols(2, 2 + VW);
  const double acp = at(w.alpha_post, 0) * static_cast<double>(c), acr = at(w.alpha_res, 0) * static_cast<double>(c);
  UlpCheck cp{"mhc H_post", 1}, cr{"mhc H_res (Sinkhorn)", 1}, cs{"mhc hyper-connect", 1};
  int64_t r0_exact = 0;
  double max_row_dev = 0;
  for (int64_t r = 0; r < T; ++r) {
    for (int i = 0; i < 4; ++i)
      cp.add(at(outs[1], r, i), 2 * sigmoid_ref(acp * at(logits, r, 4 + i) + at(w.bias_post, i)));
    double m[4][4], mx = -kInf;
    bool nan = false;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        m[i][j] = acr * at(logits, r, 8 + 4 * i + j) + at(w.bias_res, i, j);
        nan = nan || std::isnan(m[i][j]);
        mx = std::max(mx, m[i][j]);
      }
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) m[i][j] = nan ? kNaN : std::exp(m[i][j] - mx);
    sinkhorn_ref(m, 20, static_cast<double>(1e-12f));
    for (int i = 0; i < 4; ++i) {
      double ref_row = 0, out_row = 0;
      for (int j = 0; j < 4; ++j) {
        cr.add(at(outs[2], r, 4 * i + j), m[i][j]);
        ref_row += m[i][j], out_row += at(outs[2], r, 4 * i + j);
      }
      if (!nan) {
        EXPECT_NEAR(ref_row, 1.0, 1e-9);  // 1 - O(eps)
        EXPECT_NEAR(out_row, 1.0, 4 * std::ldexp(1.0, -9)) << "H_res row " << i << " of token " << r;
        max_row_dev = std::max(max_row_dev, std::fabs(out_row - 1.0));
      }
    }
    // The state update is checked against the op's own (already validated) H
    // values, so a rare H rounding flip cannot hide behind a loose tolerance.
    for (int i = 0; i < 4; ++i)
      for (int64_t col = 0; col < D; ++col) {
        double mix = 0, sa = 0;
        for (int j = 0; j < 4; ++j) {
          mix += at(outs[2], r, 4 * i + j) * at(old, r, j * D + col);
          sa += std::fabs(at(outs[2], r, 4 * i + j) * at(old, r, j * D + col));
        }
        const double post = at(outs[1], r, i) * at(o, r, col);
        const double got = at(st, r, i * D + col);
        cs.add(got, mix + post, 5 * std::ldexp(sa + std::fabs(post), -24));
        r0_exact += got == bf16_ref(bf16_ref(mix) + bf16_ref(post));
      }
  }
  cp.done(1.0), cr.done(0.97), cs.done(0.99);
  std::printf("[ %-28s] max |row sum - 1| of bf16 H_res %.4f; exact vs R0 three roundings %lld/%lld\n",
              "mhc", max_row_dev, static_cast<long long>(r0_exact), static_cast<long long>(cs.n));
  EXPECT_LT(r0_exact, cs.n - cs.n / 20);
  for (int64_t col = 0; col < VW; ++col) EXPECT_TRUE(std::isnan(at(st, T - 1, col)));
  for (int64_t r = 0; r < T; ++r)
    for (int64_t col : {0, 1}) EXPECT_EQ(at(outs[0], r, col), at(sb, r, col)) << "wrote outside the state slice";
  auto be = make_cpu_backend(1);
  Tensor s = sb.clone();
  EXPECT_TRUE(throws_with([&] {
    be->mhc_post_res({.state = s.slice_cols(2, 2 + VW), .o = ob, .logits = logits, .w = &w, .h_post = {},
                      .h_res = {}, .c = c});
  }, {"mhc_post_res.o"}));
  EXPECT_TRUE(throws_with([&] {
    be->mhc_post_res({.state = s.slice_cols(2, 2 + VW), .o = Tensor::zeros({T, D}, DType::F32), .logits = logits,
                      .w = &w, .h_post = {}, .h_res = {}, .c = c});
  }, {"mhc_post_res", " o"}));
}

// ---- MoE router (§8.2) -----------------------------------------------------

struct RouteRef {
  std::vector<int> idx;
  std::vector<double> w;
  double margin = 0;
  bool near_tie = false;
};

// Descending sel, lowest id first on exact ties, NaN selection scores first
// (spec §8.2 recommendation, as the fused routing kernel and torch.topk).
RouteRef route_ref(const Tensor& r, const Tensor& gate, const Tensor& bias, int64_t t, int h, int E, int K,
                   bool normalize, double scale, const int32_t* forced) {
  const int64_t DH = gate.size(1);
  std::vector<double> s(E), sel(E);
  for (int e = 0; e < E; ++e) {
    double l = 0;
    for (int64_t d = 0; d < DH; ++d) l += at(r, t, h * DH + d) * at(gate, h * E + e, d);
    s[e] = sigmoid_ref(l);
    sel[e] = s[e] + at(bias, h * E + e);
  }
  std::vector<int> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (std::isnan(sel[a]) || std::isnan(sel[b])) return std::isnan(sel[a]) && !std::isnan(sel[b]);
    return sel[a] > sel[b];
  });
  RouteRef rr;
  for (int j = 0; j + 1 < E && j < K; ++j) {
    const double gap = sel[order[j]] - sel[order[j + 1]];
    rr.near_tie = rr.near_tie || (gap != 0 && gap < 1e-5);
  }
  rr.margin = K < E ? sel[order[K - 1]] - sel[order[K]] : kInf;
  double l1 = 0;
  for (int j = 0; j < K; ++j) rr.idx.push_back(forced ? forced[j] : order[j]), l1 += std::fabs(s[rr.idx[j]]);
  for (int j = 0; j < K; ++j) rr.w.push_back((normalize ? s[rr.idx[j]] / std::max(l1, 1e-12) : s[rr.idx[j]]) * scale);
  return rr;
}

struct RouteCase {
  bool normalize;
  bool forced;
};

// Runs moe_route for normalize off/on and with forced indices, checking every
// (head, token) against route_ref; returns the unforced, normalised indices.
std::vector<int32_t> check_routing(const char* what, const Tensor& r, const Tensor& gate, const Tensor& bias,
                                   int MH, int E, int K, const Tensor& forced) {
  const int64_t T = r.size(0);
  const float rs = 4.9f;
  std::vector<int32_t> first;
  for (const RouteCase rc : {RouteCase{true, false}, RouteCase{false, false}, RouteCase{true, true}}) {
    auto outs = thread_invariant([&](Backend& be) {
      Tensor idx = Tensor::zeros({MH, T, K}, DType::I32), w = Tensor::zeros({MH, T, K}, DType::F32);
      Tensor margin = Tensor::zeros({MH, T}, DType::F32);
      be.moe_route({.r = r, .gate = gate, .bias = bias, .idx = idx, .weight = w,
                    .forced_idx = rc.forced ? forced : Tensor(), .margin = margin, .num_heads = MH,
                    .num_experts = E, .top_k = K, .route_scale = rs, .normalize = rc.normalize});
      return std::vector<Tensor>{idx, w, margin};
    });
    const std::string tag = std::string(what) + (rc.forced ? " forced" : rc.normalize ? " norm" : " no-norm");
    RelCheck cw{tag + " weight", 1e-5}, cm{tag + " margin (abs)", 1e-5};
    for (int h = 0; h < MH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t base = (h * T + t) * K;
        const RouteRef rr = route_ref(r, gate, bias, t, h, E, K, rc.normalize, rs,
                                      rc.forced ? forced.data_as<int32_t>() + base : nullptr);
        EXPECT_FALSE(rr.near_tie) << "pick another seed: near tie at head " << h << " token " << t;
        for (int j = 0; j < K; ++j) {
          EXPECT_EQ(outs[0].data_as<int32_t>()[base + j], rr.idx[j]) << tag << " head " << h << " token " << t
                                                                      << " slot " << j;
          cw.add(at(outs[1], base + j), rr.w[j], std::fabs(rr.w[j]));
        }
        cm.add(at(outs[2], h * T + t), rr.margin, 1.0);
      }
    cw.done(), cm.done();
    if (first.empty()) first.assign(outs[0].data_as<int32_t>(), outs[0].data_as<int32_t>() + outs[0].numel());
  }
  return first;
}

TEST(OpsCpuMoe, RouteRandom) {
  Rng g(41);
  const int MH = 2, E = 8, K = 3;
  const int64_t T = 5, DH = 6;
  Tensor rb = rand_t({T, MH * DH + 2}, DType::BF16, g, -2, 2), r = rb.slice_cols(1, 1 + MH * DH);
  Tensor gate = rand_t({MH * E, DH}, DType::F32, g, -1.5, 1.5), bias = rand_t({MH * E}, DType::F32, g, -0.1, 0.1);
  Tensor forced = Tensor::zeros({MH, T, K}, DType::I32);
  for (int64_t i = 0; i < MH * T; ++i) {  // distinct experts, not in score order
    std::vector<int32_t> p(E);
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), g);
    std::copy(p.begin(), p.begin() + K, forced.data_as<int32_t>() + i * K);
  }
  check_routing("moe_route", r, gate, bias, MH, E, K, forced);
  auto be = make_cpu_backend(1);
  Tensor idx = Tensor::zeros({MH, T, K}, DType::I32), w = Tensor::zeros({MH, T, K}, DType::F32);
  MoeRouteParams p{.r = r, .gate = gate, .bias = bias, .idx = idx, .weight = w, .forced_idx = {}, .margin = {},
                   .num_heads = MH, .num_experts = E, .top_k = K};
  p.gate = Tensor::zeros({MH * E, DH + 1}, DType::F32);
  EXPECT_TRUE(throws_with([&] { be->moe_route(p); }, {"moe_mlp.gate"}));
  p.gate = gate;
  p.forced_idx = forced.clone();
  p.forced_idx.data_as<int32_t>()[4] = E;
  EXPECT_TRUE(throws_with([&] { be->moe_route(p); }, {"forced routing", "out of range"}));
}

TEST(OpsCpuMoe, RouteExactTiesAndNaN) {
  Rng g(42);
  const int MH = 2, E = 8, K = 3;
  const int64_t T = 4, DH = 6;
  Tensor r = rand_t({T, MH * DH}, DType::BF16, g, -2, 2);
  Tensor gate = rand_t({MH * E, DH}, DType::F32, g, -1.5, 1.5), bias = rand_t({MH * E}, DType::F32, g, -0.1, 0.1);
  // Head 0: zero gate rows give every score sigmoid(0) = 0.5 exactly, so the
  // bias alone orders the experts, with exact ties at 0.3 and at 0.2.
  const float b0[E] = {0.1f, 0.3f, 0.2f, 0.2f, 0.3f, 0.2f, 0.f, 0.1f};
  for (int e = 0; e < E; ++e) {
    put(bias, 0, e, b0[e]);
    for (int64_t d = 0; d < DH; ++d) put(gate, e, d, 0.0);
  }
  put(bias, 0, E + 5, kNaN), put(bias, 0, E + 2, kNaN);  // head 1: NaN selection scores rank first
  Tensor forced = Tensor::zeros({MH, T, K}, DType::I32);
  for (int64_t i = 0; i < MH * T * K; ++i) forced.data_as<int32_t>()[i] = static_cast<int32_t>((5 * i + 3) % E);
  const std::vector<int32_t> idx = check_routing("moe_route ties", r, gate, bias, MH, E, K, forced);
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_EQ(std::vector<int32_t>(idx.begin() + t * K, idx.begin() + t * K + K), (std::vector<int32_t>{1, 4, 2}));
    EXPECT_EQ(idx[(T + t) * K + 0], 2);
    EXPECT_EQ(idx[(T + t) * K + 1], 5);
  }
}

// ---- routed experts and combination (§8.3-8.4) ------------------------------

struct ExpertBanks {
  Tensor wg, wu, wd;
};

TEST(OpsCpuMoe, ExpertsOfficialRounding) {
  Rng g(43);
  const int MH = 2, E = 4, K = 3;
  const int64_t T = 5, DH = 8, DE = 6;
  Tensor rb = rand_t({T, MH * DH + 3}, DType::BF16, g, -1.5, 1.5), r = rb.slice_cols(3, 3 + MH * DH);
  // Wide gate/up weights so that G and U cross the +-7 clamps.
  Tensor wg = rand_t({MH * E, DH, DE}, DType::BF16, g, -2.5, 2.5);
  Tensor wu = rand_t({MH * E, DH, DE}, DType::BF16, g, -2.5, 2.5);
  Tensor wd = rand_t({MH * E, DE, DH}, DType::BF16, g, -1, 1);
  Tensor idx = Tensor::zeros({MH, T, K}, DType::I32), wt = rand_t({MH, T, K}, DType::F32, g, 0.1, 2.0);
  for (int64_t i = 0; i < MH * T; ++i) {
    std::vector<int32_t> p(E);
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), g);
    std::copy(p.begin(), p.begin() + K, idx.data_as<int32_t>() + i * K);
  }
  auto outs = thread_invariant([&](Backend& be) {
    Tensor ob = Tensor::zeros({T, MH * DH + 1}, DType::BF16);
    be.moe_experts({.r = r, .w_gate = wg, .w_up = wu, .w_down = wd, .idx = idx, .weight = wt,
                    .out = ob.slice_cols(1, 1 + MH * DH), .num_heads = MH, .num_experts = E, .top_k = K});
    return std::vector<Tensor>{ob};
  });
  const Tensor out = outs[0].slice_cols(1, 1 + MH * DH);
  UlpCheck ck{"moe_experts", 1};
  int64_t r0_exact = 0, clamped = 0;
  for (int h = 0; h < MH; ++h)
    for (int64_t t = 0; t < T; ++t) {
      std::vector<std::pair<int, int>> routes;
      for (int j = 0; j < K; ++j) routes.push_back({idx.data_as<int32_t>()[(h * T + t) * K + j], j});
      std::sort(routes.begin(), routes.end());
      std::vector<double> sum(DH, 0.0), sum_abs(DH, 0.0), r0(DH, 0.0);
      for (const auto& [e, j] : routes) {
        const int64_t f = h * E + e;
        const double wk = at(wt, (h * T + t) * K + j);
        std::vector<double> z(DE), z0(DE);
        for (int64_t c = 0; c < DE; ++c) {
          double gs = 0, us = 0;
          for (int64_t d = 0; d < DH; ++d) {
            gs += at(r, t, h * DH + d) * at(wg, (f * DH + d) * DE + c);
            us += at(r, t, h * DH + d) * at(wu, (f * DH + d) * DE + c);
          }
          clamped += gs > 7 || std::fabs(us) > 7;
          z[c] = bf16_ref(swiglu7_ref(gs, us));
          z0[c] = bf16_ref(swiglu7_ref(bf16_ref(gs), bf16_ref(us)));
        }
        for (int64_t d = 0; d < DH; ++d) {
          double y = 0, y0 = 0;
          for (int64_t c = 0; c < DE; ++c) {
            y += z[c] * at(wd, (f * DE + c) * DH + d);
            y0 += z0[c] * at(wd, (f * DE + c) * DH + d);
          }
          const double cv = bf16_ref(y * wk);
          sum[d] += cv, sum_abs[d] += std::fabs(cv);
          r0[d] = bf16_ref(r0[d] + bf16_ref(bf16_ref(y0) * bf16_ref(wk)));
        }
      }
      for (int64_t d = 0; d < DH; ++d) {
        const double got = at(out, t, h * DH + d);
        ck.add(got, sum[d], K * std::ldexp(sum_abs[d], -24), " head " + std::to_string(h));
        r0_exact += got == r0[d];
      }
    }
  ck.done(0.95);
  std::printf("[ %-28s] exact vs R0 (bf16 G/U/Y/w, bf16 running sum) %lld/%lld; %lld clamped G/U\n", "moe_experts",
              static_cast<long long>(r0_exact), static_cast<long long>(ck.n), static_cast<long long>(clamped));
  EXPECT_GT(clamped, 0);
  EXPECT_LT(r0_exact, ck.n - ck.n / 20);
  auto be = make_cpu_backend(1);
  MoeExpertsParams p{.r = r, .w_gate = wg, .w_up = wu, .w_down = Tensor::zeros({MH * E, DE, DH + 1}, DType::BF16),
                     .idx = idx, .weight = wt, .out = out, .num_heads = MH, .num_experts = E, .top_k = K};
  EXPECT_TRUE(throws_with([&] { be->moe_experts(p); }, {"moe_mlp.W_down"}));
  p.w_down = wd;
  p.idx = idx.clone();
  p.idx.data_as<int32_t>()[5] = E;
  EXPECT_TRUE(throws_with([&] { be->moe_experts(p); }, {"moe_experts.idx"}));
}

// Route outputs c_e = bf16(Y w) are summed in fp32 in ascending expert id,
// whatever the top-k slot order. With c = {2^24 y, y, -2^24 y} for experts
// 0, 1, 2 that order loses y (absorbed into 2^24 y) while the slot order
// (2, 0, 1) would return y exactly, so the result pins the order.
TEST(OpsCpuMoe, ExpertsCombineInAscendingExpertId) {
  const int MH = 1, E = 4, K = 3;
  const int64_t T = 1, DH = 2, DE = 2;
  Tensor r = Tensor::zeros({T, DH}, DType::BF16);
  put(r, 0, 0, 1.0);
  Tensor wg = Tensor::zeros({E, DH, DE}, DType::BF16), wu = Tensor::zeros({E, DH, DE}, DType::BF16);
  Tensor wd = Tensor::zeros({E, DE, DH}, DType::BF16);
  for (int e = 0; e < E; ++e) {  // identical experts: G = 1, U = 0, Y = (Z_0, 0)
    put(wg.reshape({E * DH, DE}), e * DH, 0, 1.0), put(wg.reshape({E * DH, DE}), e * DH, 1, 1.0);
    put(wd.reshape({E * DE, DH}), e * DE, 0, 1.0);
  }
  const double y = bf16_ref(swiglu7_ref(1.0, 0.0));
  const int32_t slots[K] = {2, 0, 1};
  const float ws[K] = {-16777216.f, 16777216.f, 1.f};
  Tensor idx = Tensor::zeros({MH, T, K}, DType::I32), wt = Tensor::zeros({MH, T, K}, DType::F32);
  for (int j = 0; j < K; ++j) idx.data_as<int32_t>()[j] = slots[j], wt.data_as<float>()[j] = ws[j];
  auto outs = thread_invariant([&](Backend& be) {
    Tensor o = Tensor::zeros({T, DH}, DType::BF16), one = Tensor::zeros({T, DH}, DType::BF16);
    be.moe_experts({.r = r, .w_gate = wg, .w_up = wu, .w_down = wd, .idx = idx, .weight = wt, .out = o,
                    .num_heads = MH, .num_experts = E, .top_k = K});
    be.moe_experts({.r = r, .w_gate = wg, .w_up = wu, .w_down = wd, .idx = Tensor::zeros({1, 1, 1}, DType::I32),
                    .weight = Tensor::from_f32({1, 1, 1}, {1.f}), .out = one, .num_heads = MH, .num_experts = E,
                    .top_k = 1});
    return std::vector<Tensor>{o, one};
  });
  const float c0 = static_cast<float>(y * 16777216.0), c1 = static_cast<float>(y), c2 = -c0;
  const float ascending = (c0 + c1) + c2;
  ASSERT_EQ(at(outs[1], 0, 0), y) << "single route: Y = Z_0 = bf16(swiglu7(1, 0))";
  ASSERT_NE(static_cast<double>(ascending), y) << "test values do not discriminate the order";
  EXPECT_EQ(at(outs[0], 0, 0), bf16_ref(ascending));
  EXPECT_EQ(at(outs[0], 0, 1), 0.0);
}

}  // namespace
}  // namespace magi2
