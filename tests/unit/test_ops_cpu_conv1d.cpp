// CPU conv1d, conv_transpose1d and snake_beta against float64 references
// written here from the torch definitions (nn.Conv1d / nn.ConvTranspose1d with
// weights in torch layout, indexed independently of the op's tiling) and the
// official SnakeBeta formula (spec magi2-pipeline.md §6.2). fp32 outputs are
// checked as |out - ref| <= tol * sum|terms| (RelCheck), and each op must be
// bit-identical for 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"
#include "unit/ops_reference.h"

namespace magi2 {
namespace {

// torch Conv1d weight [Cout, Cin, K] -> the op's [K, Cin, Cout].
Tensor conv_weight_to_op(const Tensor& w) {
  const int64_t co = w.size(0), ci = w.size(1), k = w.size(2);
  Tensor out = Tensor::zeros({k, ci, co}, DType::F32);
  for (int64_t o = 0; o < co; ++o)
    for (int64_t i = 0; i < ci; ++i)
      for (int64_t t = 0; t < k; ++t)
        out.data_as<float>()[(t * ci + i) * co + o] = w.data_as<float>()[(o * ci + i) * k + t];
  return out;
}

// torch ConvTranspose1d weight [Cin, Cout, K] -> the op's [K, Cin, Cout].
Tensor convt_weight_to_op(const Tensor& w) {
  const int64_t ci = w.size(0), co = w.size(1), k = w.size(2);
  Tensor out = Tensor::zeros({k, ci, co}, DType::F32);
  for (int64_t i = 0; i < ci; ++i)
    for (int64_t o = 0; o < co; ++o)
      for (int64_t t = 0; t < k; ++t)
        out.data_as<float>()[(t * ci + i) * co + o] = w.data_as<float>()[(i * co + o) * k + t];
  return out;
}

struct ConvCase {
  int64_t lin, cin, cout, k, stride, padding, dilation;
  bool bias, residual;
};

TEST(OpsCpuConv1d, MatchesFloat64Reference) {
  const ConvCase cases[] = {
      {12, 64, 64, 7, 1, 3, 1, true, false},   // tiny decoder input conv
      {50, 13, 21, 7, 1, 9, 3, true, true},    // dilated residual conv, ragged tiles
      {40, 9, 5, 7, 1, 27, 9, true, false},    // padding wider than the input
      {33, 16, 2, 7, 1, 3, 1, false, false},   // final conv: 2 outputs, no bias
      {17, 8, 11, 1, 1, 0, 1, true, true},     // k1 conv with the residual skip
      {30, 6, 10, 4, 2, 1, 1, true, false},    // strided (encoder downsampling)
  };
  Rng g(5);
  for (const ConvCase& c : cases) {
    const int64_t lout = (c.lin + 2 * c.padding - c.dilation * (c.k - 1) - 1) / c.stride + 1;
    Tensor x = rand_t({c.lin, c.cin}, DType::F32, g, -2, 2);
    Tensor wt = rand_t({c.cout, c.cin, c.k}, DType::F32, g, -1, 1);
    Tensor b = c.bias ? rand_t({c.cout}, DType::F32, g, -1, 1) : Tensor();
    Tensor res = c.residual ? rand_t({lout, c.cout}, DType::F32, g, -1, 1) : Tensor();
    Tensor w = conv_weight_to_op(wt);
    auto outs = thread_invariant([&](Backend& be) {
      Tensor y = be.alloc({lout, c.cout}, DType::F32);
      be.conv1d({.x = x, .w = w, .bias = b, .residual = res, .y = y, .stride = c.stride,
                 .padding = c.padding, .dilation = c.dilation});
      return std::vector<Tensor>{y};
    });
    RelCheck chk{str_cat("conv1d k", c.k, " d", c.dilation, " s", c.stride, " ", c.cin, "->", c.cout), 4e-6};
    for (int64_t t = 0; t < lout; ++t)
      for (int64_t o = 0; o < c.cout; ++o) {
        double ref = 0, scale = 0;
        for (int64_t i = 0; i < c.cin; ++i)
          for (int64_t k = 0; k < c.k; ++k) {
            const int64_t s = t * c.stride + k * c.dilation - c.padding;
            if (s < 0 || s >= c.lin) continue;
            const double term = at(x, s, i) * at(wt, (o * c.cin + i) * c.k + k);
            ref += term;
            scale += std::fabs(term);
          }
        if (c.bias) ref += at(b, o), scale += std::fabs(at(b, o));
        if (c.residual) ref += at(res, t, o), scale += std::fabs(at(res, t, o));
        chk.add(at(outs[0], t, o), ref, scale);
      }
    chk.done();
  }
}

TEST(OpsCpuConv1d, ResidualMayAliasOutput) {
  Rng g(6);
  Tensor x = rand_t({20, 8}, DType::F32, g, -1, 1), w = rand_t({1, 8, 8}, DType::F32, g, -1, 1);
  Tensor res = rand_t({20, 8}, DType::F32, g, -1, 1);
  auto be = make_cpu_backend(2);
  Tensor y = be->alloc({20, 8}, DType::F32);
  be->conv1d({.x = x, .w = w, .residual = res, .y = y});
  Tensor in_place = res.clone();
  be->conv1d({.x = x, .w = w, .residual = in_place, .y = in_place});
  EXPECT_EQ(std::memcmp(y.data(), in_place.data(), y.nbytes()), 0);
}

TEST(OpsCpuConv1d, TransposedMatchesFloat64Reference) {
  struct Case { int64_t lin, cin, cout, stride; };
  // Oobleck upsamplers: kernel 2s, padding ceil(s/2) (official DecoderBlock).
  const Case cases[] = {{12, 64, 32, 8}, {7, 9, 13, 4}, {11, 4, 4, 2}, {5, 3, 6, 3}, {9, 5, 7, 1}};
  Rng g(7);
  for (const Case& c : cases) {
    const int64_t k = 2 * c.stride, pad = (c.stride + 1) / 2;
    const int64_t lout = (c.lin - 1) * c.stride - 2 * pad + k;
    Tensor x = rand_t({c.lin, c.cin}, DType::F32, g, -2, 2);
    Tensor wt = rand_t({c.cin, c.cout, k}, DType::F32, g, -1, 1);
    Tensor b = rand_t({c.cout}, DType::F32, g, -1, 1);
    Tensor w = convt_weight_to_op(wt);
    auto outs = thread_invariant([&](Backend& be) {
      Tensor y = be.alloc({lout, c.cout}, DType::F32);
      be.conv_transpose1d({.x = x, .w = w, .bias = b, .y = y, .stride = c.stride, .padding = pad});
      return std::vector<Tensor>{y};
    });
    // Scatter form of the definition: input row j feeds output j*s - pad + k.
    std::vector<double> ref(lout * c.cout, 0.0), scale(lout * c.cout, 0.0);
    for (int64_t j = 0; j < c.lin; ++j)
      for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t t = j * c.stride - pad + kk;
        if (t < 0 || t >= lout) continue;
        for (int64_t i = 0; i < c.cin; ++i)
          for (int64_t o = 0; o < c.cout; ++o) {
            const double term = at(x, j, i) * at(wt, (i * c.cout + o) * k + kk);
            ref[t * c.cout + o] += term;
            scale[t * c.cout + o] += std::fabs(term);
          }
      }
    RelCheck chk{str_cat("conv_transpose1d s", c.stride, " ", c.cin, "->", c.cout), 4e-6};
    for (int64_t t = 0; t < lout; ++t)
      for (int64_t o = 0; o < c.cout; ++o)
        chk.add(at(outs[0], t, o), ref[t * c.cout + o] + at(b, o), scale[t * c.cout + o] + std::fabs(at(b, o)));
    chk.done();
  }
}

TEST(OpsCpuConv1d, SnakeBetaMatchesFloat64Reference) {
  Rng g(8);
  const int64_t L = 37, C = 11;
  Tensor x = rand_t({L, C}, DType::F32, g, -6, 6);
  Tensor alpha = rand_t({C}, DType::F32, g, -1.5, 1.5), beta = rand_t({C}, DType::F32, g, -1.5, 1.5);
  for (bool logscale : {true, false}) {
    Tensor a = logscale ? alpha : rand_t({C}, DType::F32, g, 0.2, 3.0);
    Tensor b = logscale ? beta : rand_t({C}, DType::F32, g, 0.2, 3.0);
    auto outs = thread_invariant([&](Backend& be) {
      Tensor y = be.alloc({L, C}, DType::F32);
      be.snake_beta({.x = x, .alpha = a, .beta = b, .y = y, .logscale = logscale});
      Tensor in_place = x.clone();
      be.snake_beta({.x = in_place, .alpha = a, .beta = b, .y = in_place, .logscale = logscale});
      EXPECT_EQ(std::memcmp(y.data(), in_place.data(), y.nbytes()), 0);
      return std::vector<Tensor>{y};
    });
    RelCheck chk{logscale ? "snake_beta (logscale)" : "snake_beta (linear)", 2e-6};
    for (int64_t r = 0; r < L; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const double av = logscale ? std::exp(at(a, c)) : at(a, c);
        const double bv = logscale ? std::exp(at(b, c)) : at(b, c);
        const double v = at(x, r, c), s = std::sin(v * av);
        const double term = s * s / (bv + 1e-9);
        chk.add(at(outs[0], r, c), v + term, std::fabs(v) + std::fabs(term) + 1e-6);
      }
    chk.done();
  }
}

TEST(OpsCpuConv1d, RejectsBadShapes) {
  auto be = make_cpu_backend(1);
  Tensor x = Tensor::zeros({10, 4}, DType::F32), w = Tensor::zeros({3, 4, 5}, DType::F32);
  EXPECT_TRUE(throws_with([&] { be->conv1d({.x = x, .w = w, .y = Tensor::zeros({9, 5}, DType::F32)}); },
                          {"conv1d.y", "[8, 5]"}));
  EXPECT_TRUE(throws_with([&] { be->conv1d({.x = x, .w = Tensor::zeros({3, 5, 5}, DType::F32),
                                             .y = Tensor::zeros({8, 5}, DType::F32)}); },
                          {"conv1d.w"}));
  EXPECT_TRUE(throws_with([&] { be->conv_transpose1d({.x = x, .w = w, .y = Tensor::zeros({10, 5}, DType::F32),
                                                       .stride = 2, .padding = 1}); },
                          {"conv_transpose1d.y", "[19, 5]"}));
  EXPECT_TRUE(throws_with([&] { be->snake_beta({.x = x, .alpha = Tensor::zeros({3}, DType::F32),
                                                 .beta = Tensor::zeros({4}, DType::F32), .y = x}); },
                          {"snake_beta.alpha"}));
}

}  // namespace
}  // namespace magi2
