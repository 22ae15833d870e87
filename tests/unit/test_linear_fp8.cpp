// FP8 linears on the CPU backend (LinearParams::w_scale, `--linear-compute
// fp8`; cpu/linear_fp8.cpp, the reference of the CUDA path): inputs exact in
// e4m3 give the exact product, random inputs stay within W8A8's error of the
// bf16 linear, each row group uses its own modality's blocks, the bytes do not
// depend on the thread count, bad operands are one error naming them, and
// DitWeights::quantize_linears turns every dense linear but linear_g into FP8.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "engine/tiny_model.h"
#include "models/magi2_dit/weights.h"
#include "ops/fp8_blocks.h"
#include "ops/numerics.h"
#include "ops_reference.h"

namespace magi2 {
namespace {

// A [G*out, in] bf16 weight quantised per modality: (q, scale [G, ceil(out/128), ceil(in/128)]).
Fp8Blocks quantise(const Tensor& w, int64_t groups) {
  Fp8Blocks b = quantize_fp8_blocks(w.reshape({groups, w.size(0) / groups, w.size(1)}), "w");
  b.q = b.q.reshape(w.shape());
  return b;
}

TEST(LinearFp8, ExactInE4m3GivesTheExactProduct) {
  // x and W take small integers (exact in e4m3); one element of each 128 x 128
  // block (and of each x group) is 448, so every scale is 1 and each output is the
  // exact integer dot product.
  const int64_t rows = 3, in = 256, out = 130;
  Tensor x = Tensor::empty({rows, in}, DType::BF16), w = Tensor::empty({out, in}, DType::BF16);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < in; ++k) put(x, r, k, k % 128 == 0 ? 448 : static_cast<double>((r + k) % 7) - 3);
  for (int64_t j = 0; j < out; ++j)
    for (int64_t k = 0; k < in; ++k) put(w, j, k, (j % 128 == 0 && k % 128 == 0) ? 448 : ((j * 3 + k) % 5) - 2.0);
  const Fp8Blocks q = quantise(w, 1);
  for (int64_t i = 0; i < q.scale_inv.numel(); ++i) ASSERT_EQ(q.scale_inv.data_as<float>()[i], 1.0f);
  auto be = make_cpu_backend(2);
  Tensor y = Tensor::empty({rows, out}, DType::BF16);
  be->linear({.x = x, .w = q.q, .y = y, .groups = Groups::single(rows), .w_scale = q.scale_inv});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out; ++j) {
      double want = 0;
      for (int64_t k = 0; k < in; ++k) want += at(x, r, k) * at(w, j, k);
      EXPECT_EQ(at(y, r, j), bf16_ref(want)) << r << ", " << j;
    }
}

TEST(LinearFp8, WithinW8a8ErrorOfBf16PerGroupAndThreadInvariant) {
  Rng g(11);
  const int64_t in = 384, out = 256, groups = 3;
  Groups gr;
  gr.cu = {0, 70, 70, 200};  // an empty modality in the middle
  gr.count = static_cast<int>(groups);
  const int64_t rows = gr.rows();
  const Tensor x = rand_t({rows, in}, DType::BF16, g, -2, 2);
  const Tensor w = rand_t({groups * out, in}, DType::BF16, g, -0.1, 0.1);
  const Fp8Blocks q = quantise(w, groups);
  const std::vector<Tensor> got = thread_invariant([&](Backend& be) {
    Tensor y = Tensor::empty({rows, out}, DType::BF16);
    be.linear({.x = x, .w = q.q, .y = y, .groups = gr, .w_scale = q.scale_inv});
    return std::vector<Tensor>{y};
  });
  auto be = make_cpu_backend(2);
  Tensor want = Tensor::empty({rows, out}, DType::BF16);
  be->linear({.x = x, .w = w, .y = want, .groups = gr});
  const test::Diff d = test::compare(got[0], want);
  std::printf("FP8 linear vs bf16: rel-RMS %.4f, max-abs %.4f\n", d.rel_rms, d.max_abs);
  EXPECT_GT(d.rel_rms, 0.0);
  EXPECT_LT(d.rel_rms, 0.06);  // e4m3 keeps 3 mantissa bits in x and W
  // Group 2 alone (its rows, its modality's weight and scales) gives the same bytes.
  Tensor y2 = Tensor::empty({rows - 70, out}, DType::BF16);
  const Tensor w2 = q.q.slice_rows(2 * out, 3 * out).clone();
  const Tensor s2 = q.scale_inv.reshape({groups, q.scale_inv.numel() / groups})
                        .slice_rows(2, 3)
                        .clone()
                        .reshape({1, q.scale_inv.size(1), q.scale_inv.size(2)});
  be->linear({.x = x.slice_rows(70, rows), .w = w2, .y = y2, .groups = Groups::single(rows - 70), .w_scale = s2});
  EXPECT_EQ(test::differing_elements(y2, got[0].slice_rows(70, rows).clone()), 0);
}

TEST(LinearFp8, BadOperandsAreOneErrorNamingThem) {
  Rng g(2);
  auto be = make_cpu_backend(1);
  const Tensor x = rand_t({4, 128}, DType::BF16, g, -1, 1), w = rand_t({128, 128}, DType::BF16, g, -1, 1);
  const Fp8Blocks q = quantise(w, 1);
  Tensor y = Tensor::empty({4, 128}, DType::BF16);
  const LinearParams ok{.x = x, .w = q.q, .y = y, .groups = Groups::single(4), .w_scale = q.scale_inv};
  LinearParams p = ok;
  p.w_scale = Tensor::zeros({1, 2, 1}, DType::F32);
  EXPECT_TRUE(test::throws_with([&] { be->linear(p); }, {"linear.w_scale"}));
  p = ok;
  p.w_scale = Tensor();
  EXPECT_TRUE(test::throws_with([&] { be->linear(p); }, {"linear.w_scale"}));
  p = ok;
  p.bias = Tensor::zeros({128}, DType::F32);
  EXPECT_TRUE(test::throws_with([&] { be->linear(p); }, {"bias"}));
  p = ok;
  p.x = rand_t({4, 128}, DType::F32, g, -1, 1);
  EXPECT_TRUE(test::throws_with([&] { be->linear(p); }, {"bf16"}));
}

TEST(LinearFp8, RmsNormFp8RowsAreTheQuantisationOfItsBf16Output) {
  // RmsNormParams::y8: the e4m3 rows and scales of y's bf16 values by the
  // activation rule, whatever the thread count; a linear given them as x8
  // gives the bytes it gives without them (the CPU quantises x itself).
  Rng g(5);
  const int64_t rows = 37, d = 384;
  Groups gr;
  gr.cu = {0, 10, 20, rows};
  gr.count = 3;
  const Tensor x = rand_t({rows, d}, DType::BF16, g, -4, 4), nw = rand_t({3 * d}, DType::F32, g, -0.2, 0.2);
  const std::vector<Tensor> got = thread_invariant([&](Backend& be) {
    Tensor y = Tensor::empty({rows, d}, DType::BF16);
    const Fp8Rows y8{Tensor::empty({rows, d}, DType::F8E4M3), Tensor::empty({rows, d / kFp8ActGroup}, DType::F32)};
    be.rms_norm({.x = x, .w = nw, .y = y, .groups = gr, .y8 = y8});
    return std::vector<Tensor>{y, y8.q, y8.scale};
  });
  const uint16_t* y = got[0].data_as<uint16_t>();
  const uint8_t* q = got[1].data_as<uint8_t>();
  const float* sc = got[2].data_as<float>();
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < d / kFp8ActGroup; ++b) {
      float amax = 0.f;
      for (int64_t k = 0; k < kFp8ActGroup; ++k) amax = fp8_amax_step(amax, bf16_bits_to_f32(y[r * d + b * 128 + k]));
      const float s = fp8_act_scale(amax);
      bad += sc[r * (d / kFp8ActGroup) + b] != s;
      for (int64_t k = 0; k < kFp8ActGroup; ++k)
        bad += q[r * d + b * 128 + k] != fp8_act_quant(bf16_bits_to_f32(y[r * d + b * 128 + k]), s);
    }
  EXPECT_EQ(bad, 0);
  auto be = make_cpu_backend(2);
  const Fp8Blocks wq = quantise(rand_t({256, d}, DType::BF16, g, -0.1, 0.1), 1);
  Tensor y_own = Tensor::empty({rows, 256}, DType::BF16), y_x8 = Tensor::empty({rows, 256}, DType::BF16);
  be->linear({.x = got[0], .w = wq.q, .y = y_own, .groups = Groups::single(rows), .w_scale = wq.scale_inv});
  be->linear({.x = got[0], .w = wq.q, .y = y_x8, .groups = Groups::single(rows), .w_scale = wq.scale_inv,
              .x8 = {got[1], got[2]}});
  EXPECT_EQ(test::differing_elements(y_own, y_x8), 0);
  // y8 needs a bf16 y and FP8 rows of y's shape.
  Tensor yf = Tensor::empty({rows, d}, DType::F32);
  EXPECT_TRUE(test::throws_with(
      [&] { be->rms_norm({.x = x, .w = nw, .y = yf, .groups = gr, .y8 = {got[1], got[2]}}); }, {"rms_norm.y8"}));
  Tensor yb = Tensor::empty({rows, d}, DType::BF16);
  EXPECT_TRUE(test::throws_with(
      [&] { be->rms_norm({.x = x, .w = nw, .y = yb, .groups = gr, .y8 = {got[1], got[1]}}); }, {"rms_norm.y8.scale"}));
}

TEST(LinearFp8, DitWeightsQuantiseEveryDenseLinearButTheGate) {
  const DitArch a = tiny_config().arch;
  uint32_t seed = 3;
  DitWeights w = DitWeights::generate(a, [&](const DitTensorSpec& s) {
    Rng g(seed++);
    return s.dtype == DType::BF16 ? rand_t(s.shape, DType::BF16, g, -0.1, 0.1) : Tensor::zeros(s.shape, s.dtype);
  });
  const size_t bytes16 = w.num_bytes;
  EXPECT_FALSE(w.fp8_linears());
  w.quantize_linears();
  EXPECT_TRUE(w.fp8_linears());
  EXPECT_LT(w.num_bytes, bytes16);
  int quantised = 0;
  for (DitLayerWeights& L : w.layers) {
    EXPECT_EQ(L.linear_g.dtype(), DType::BF16);
    for_each_fp8_linear(L, [&](const char* name, Tensor& t, Tensor& scale, int groups) {
      if (!t.defined()) {
        EXPECT_FALSE(scale.defined()) << name;
        return;
      }
      ++quantised;
      EXPECT_EQ(t.dtype(), DType::F8E4M3) << name;
      const Shape want{groups, (t.size(0) / groups + 127) / 128, (t.size(1) + 127) / 128};
      EXPECT_EQ(scale.shape(), want) << name;
    });
  }
  EXPECT_GT(quantised, 0);
  const size_t bytes8 = w.num_bytes;
  w.quantize_linears();  // a no-op now
  EXPECT_EQ(w.num_bytes, bytes8);
  EXPECT_TRUE(fp8_from_compute_name("fp8", "--linear-compute"));
  EXPECT_FALSE(fp8_from_compute_name("bf16", "--linear-compute"));
  EXPECT_THROW(fp8_from_compute_name("fp16", "--linear-compute"), Error);
}

}  // namespace
}  // namespace magi2
