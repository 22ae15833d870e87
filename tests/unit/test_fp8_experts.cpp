// FP8 routed experts (docs/fp8.md): the e4m3 codec against torch's values, the
// 128 x 128 block quantiser, the CPU W8A16 expert op = the bf16 op on the
// dequantised banks, bit for bit, and W8A8 (MoeExpertsParams::fp8_compute):
// the activation group rule of ops/numerics.h and the accuracy of the W8A8 op
// against W8A16 on the same FP8 banks and bf16 on the original banks, at the
// release widths (d_head 256, d_expert 1280) with random weights. The rel-RMS
// values printed are the ones docs/fp8.md and docs/parity.md record; those
// bounds are loose on purpose.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "engine/tiny_model.h"
#include "models/magi2_dit/weights.h"
#include "ops/fp8_blocks.h"
#include "ops/numerics.h"
#include "ops/ops.h"
#include "util/testing.h"

namespace magi2 {
namespace {

// fp32 -> e4m3fn bits that torch's `.to(torch.float8_e4m3fn)` gives (c10
// fp8e4m3fn_from_fp32_value), derived by hand from the format (bias 7, 3
// mantissa bits, subnormal unit 2^-9, ties to even) and checked against the
// torch rounding rules: exact values, ties in the normal and the subnormal
// range, the largest finite value and the rounding that reaches it.
TEST(E4m3Codec, TorchValues) {
  struct Case {
    float x;
    uint8_t bits;
  };
  const Case cases[] = {
      {0.0f, 0x00},         {-0.0f, 0x80},        {1.0f, 0x38},          {-2.0f, 0xc0},
      {0.1f, 0x1d},         // 1.6 * 2^-4: mantissa 4.8 units -> 5 (0.1015625)
      {17.0f, 0x58},        // 1.0625 * 2^4: half a unit, ties to even -> 16
      {18.0f, 0x59},        {19.0f, 0x5a},        // 19: tie between 18 and 20 -> even mantissa (20)
      {240.0f, 0x77},       {448.0f, 0x7e},       {-448.0f, 0xfe},
      {464.0f, 0x7e},       // tie between 448 and (NaN) 480: even -> 448, as torch
      {0.001953125f, 0x01}, // 2^-9, the smallest subnormal
      {0.0009765625f, 0x00},  // 2^-10: tie between 0 and 2^-9 -> even (0)
      {0.00146484375f, 0x01}, // 0.75 * 2^-9 -> 1 unit
      {0.0068359375f, 0x04},  // 3.5 units: tie -> 4
      {0.013671875f, 0x07},   // 7 units, the largest subnormal
      {0.0146484375f, 0x08},  // 7.5 units: tie -> 8 units = 2^-6, the smallest normal
      {0.015625f, 0x08},      {-0.3f, 0xaa},  // 1.2 * 2^-2: 1.6 units -> 2 (-0.3125)
  };
  for (const Case& c : cases) {
    EXPECT_EQ(f32_to_e4m3_bits(c.x), c.bits) << c.x;
    if ((c.bits & 0x7f) != 0x7f) {
      const float back = e4m3_bits_to_f32(c.bits);
      EXPECT_EQ(f32_to_e4m3_bits(back), c.bits) << c.x;
    }
  }
  EXPECT_EQ(e4m3_bits_to_f32(0x1d), 0.1015625f);
  EXPECT_EQ(e4m3_bits_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_bits_to_f32(0x01), 0.001953125f);
  EXPECT_TRUE(std::isnan(e4m3_bits_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_bits_to_f32(0xff)));
  EXPECT_EQ(f32_to_e4m3_bits(std::nanf("")), 0x7f);
  // Beyond torch's range (it returns NaN above 464) the codec saturates.
  EXPECT_EQ(f32_to_e4m3_bits(1000.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3_bits(-INFINITY), 0xfe);
  // The Tensor conversion is the same codec.
  EXPECT_EQ(f32_to_f8e4m3_bits(0.1f), 0x1d);
}

Tensor random_bf16(const Shape& s, float sd, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.f, sd);
  Tensor t = Tensor::empty(s, DType::BF16);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<uint16_t>()[i] = f32_to_bf16_bits(n(g));
  return t;
}

TEST(Fp8Blocks, ScalesPerBlockAndBoundedError) {
  // Two matrices of 130 x 200: partial blocks in both dimensions.
  Tensor w = random_bf16({2, 130, 200}, 0.05f, 1);
  // One block all zero (scale 1), one with a single large value.
  for (int64_t r = 128; r < 130; ++r)
    for (int64_t c = 128; c < 200; ++c) w.data_as<uint16_t>()[(1 * 130 + r) * 200 + c] = 0;
  w.data_as<uint16_t>()[5] = f32_to_bf16_bits(3.0f);
  const Fp8Blocks q = quantize_fp8_blocks(w, "w");
  ASSERT_EQ(q.scale_inv.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(fp8_scale_shape({2, 130, 200}), (Shape{2, 2, 2}));
  EXPECT_EQ(q.scale_inv.data_as<float>()[0], 3.0f / 448.0f);
  EXPECT_EQ(q.scale_inv.data_as<float>()[(1 * 2 + 1) * 2 + 1], 1.0f);
  EXPECT_EQ(q.q.data_as<uint8_t>()[5], 0x7e);  // the block maximum maps to 448
  const Tensor d = dequantize_fp8_blocks(q.q, q.scale_inv, "w");
  ASSERT_EQ(d.shape(), w.shape());
  for (int64_t m = 0; m < 2; ++m)
    for (int64_t r = 0; r < 130; ++r)
      for (int64_t c = 0; c < 200; ++c) {
        const int64_t e = (m * 130 + r) * 200 + c;
        const float s = q.scale_inv.data_as<float>()[(m * 2 + r / 128) * 2 + c / 128];
        const float x = w.get_f32(e), y = d.get_f32(e);
        // 3 mantissa bits: relative error <= 2^-4 (normals) plus the bf16 rounding;
        // subnormals: half a unit of 2^-9 * scale.
        EXPECT_LE(std::fabs(x - y), std::fabs(x) * (1.0f / 16 + 1.0f / 256) + s * 0.0011f) << e;
        EXPECT_EQ(d.data_as<uint16_t>()[e],
                  f32_to_bf16_bits(fp8_dequant_f32(q.q.data_as<uint8_t>()[e], s)));
      }
}

TEST(Fp8Blocks, ErrorsNameTheTensor) {
  Tensor w = random_bf16({1, 4, 4}, 1.f, 2);
  w.data_as<uint16_t>()[3] = f32_to_bf16_bits(INFINITY);
  try {
    (void)quantize_fp8_blocks(w, "block.layers.2.mlp.moe_mlp.W_up");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block.layers.2.mlp.moe_mlp.W_up"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
  }
  const Fp8Blocks q = quantize_fp8_blocks(random_bf16({1, 4, 4}, 1.f, 3), "w");
  try {
    (void)dequantize_fp8_blocks(q.q, Tensor::zeros({1, 2, 1}, DType::F32), "W_down");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("W_down_scale_inv"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fp8_scale_name("a.W_gate"), "a.W_gate_scale_inv");
}

// W8A16 on the CPU: the FP8 op is the bf16 op on bf16(q * scale) banks, bit for bit.
TEST(Fp8Experts, CpuOpEqualsBf16OpOnDequantisedBanks) {
  const int mh = 2, ne = 4, k = 2;
  const int64_t dh = 16, de = 136, t = 5;  // de > 128: two scale blocks along it
  Tensor wg = random_bf16({mh * ne, dh, de}, 0.5f, 4), wu = random_bf16({mh * ne, dh, de}, 0.5f, 5);
  Tensor wd = random_bf16({mh * ne, de, dh}, 0.1f, 6);
  const Fp8Blocks qg = quantize_fp8_blocks(wg, "W_gate"), qu = quantize_fp8_blocks(wu, "W_up"),
                  qd = quantize_fp8_blocks(wd, "W_down");
  Tensor r = random_bf16({t, mh * dh}, 1.f, 7);
  std::vector<int32_t> idx;
  std::vector<float> wt;
  for (int h = 0; h < mh; ++h)
    for (int64_t n = 0; n < t; ++n)
      for (int j = 0; j < k; ++j) {
        idx.push_back(static_cast<int32_t>((n + 3 * j + h) % ne));
        wt.push_back(0.5f + 0.25f * j);
      }
  const Tensor ti = Tensor::from_i32({mh, t, k}, idx), tw = Tensor::from_f32({mh, t, k}, wt);
  auto be = make_cpu_backend(1);
  Tensor out8 = Tensor::zeros({t, mh * dh}, DType::BF16), out16 = Tensor::zeros({t, mh * dh}, DType::BF16);
  be->moe_experts({.r = r, .w_gate = qg.q, .w_up = qu.q, .w_down = qd.q, .w_gate_scale = qg.scale_inv,
                   .w_up_scale = qu.scale_inv, .w_down_scale = qd.scale_inv, .idx = ti, .weight = tw, .out = out8,
                   .num_heads = mh, .num_experts = ne, .top_k = k});
  be->moe_experts({.r = r, .w_gate = dequantize_fp8_blocks(qg.q, qg.scale_inv, "g"),
                   .w_up = dequantize_fp8_blocks(qu.q, qu.scale_inv, "u"),
                   .w_down = dequantize_fp8_blocks(qd.q, qd.scale_inv, "d"), .idx = ti, .weight = tw, .out = out16,
                   .num_heads = mh, .num_experts = ne, .top_k = k});
  int64_t nonzero = 0;
  for (int64_t i = 0; i < out8.numel(); ++i) {
    EXPECT_EQ(out8.data_as<uint16_t>()[i], out16.data_as<uint16_t>()[i]) << i;
    nonzero += out8.get_f32(i) != 0.f;
  }
  EXPECT_GT(nonzero, out8.numel() / 2);
  // A missing scale tensor is refused, naming it.
  MoeExpertsParams p{.r = r, .w_gate = qg.q, .w_up = qu.q, .w_down = qd.q, .w_gate_scale = qg.scale_inv,
                     .w_up_scale = qu.scale_inv, .idx = ti, .weight = tw, .out = out8,
                     .num_heads = mh, .num_experts = ne, .top_k = k};
  try {
    be->moe_experts(p);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("W_down_scale_inv"), std::string::npos) << e.what();
  }
}

// DitWeights: quantize_experts turns only the routed banks into FP8 (+ scales);
// dequantize_experts gives back bf16(q * scale).
TEST(Fp8Experts, DitWeightsQuantiseOnlyTheRoutedBanks) {
  const DitArch a = tiny_config().arch;  // MoE layers 1 and 2: 4 heads x 16 experts, DH 16, DE 32
  uint32_t seed = 10;
  DitWeights w = DitWeights::generate(a, [&](const DitTensorSpec& s) {
    return s.dtype == DType::BF16 ? random_bf16(s.shape, 0.1f, seed++) : Tensor::zeros(s.shape, s.dtype);
  });
  const size_t bytes16 = w.num_bytes;
  DitLayerWeights& L = w.layers[1];
  const Tensor shared16 = L.shared_fc1;
  w.quantize_experts();
  EXPECT_TRUE(w.fp8_experts());
  EXPECT_EQ(L.w_down.dtype(), DType::F8E4M3);
  EXPECT_EQ(L.w_down_scale.shape(), (Shape{64, 1, 1}));
  EXPECT_EQ(L.shared_fc1.data(), shared16.data());  // untouched
  EXPECT_FALSE(w.layers[0].w_gate.defined());        // a dense layer
  EXPECT_LT(w.num_bytes, bytes16);
  const Tensor want = dequantize_fp8_blocks(L.w_gate, L.w_gate_scale, "g");
  w.dequantize_experts();
  EXPECT_FALSE(w.fp8_experts());
  EXPECT_FALSE(L.w_gate_scale.defined());
  ASSERT_EQ(L.w_gate.dtype(), DType::BF16);
  EXPECT_EQ(std::memcmp(L.w_gate.data(), want.data(), want.nbytes()), 0);
  // The FP8 spec list: each bank followed by its scales.
  const auto specs = dit_tensor_specs(a, ExpertWeights::FP8);
  size_t scales = 0;
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name.ends_with("_scale_inv")) {
      ++scales;
      EXPECT_EQ(specs[i].name, fp8_scale_name(specs[i - 1].name));
      EXPECT_EQ(specs[i - 1].dtype, DType::F8E4M3);
      EXPECT_TRUE(is_routed_expert_weight(specs[i - 1].name));
    }
  EXPECT_EQ(scales, 6u);
  EXPECT_EQ(expert_weights_from_name("fp8-experts", "--weights"), ExpertWeights::FP8);
  EXPECT_THROW(expert_weights_from_name("fp8", "--weights"), Error);
}

TEST(Fp8Activations, GroupScaleAndRounding) {
  // amax / 448 with an fp32 division; an all-zero group has scale 1.
  EXPECT_EQ(fp8_act_scale(3.0f), 3.0f / 448.0f);
  EXPECT_EQ(fp8_act_scale(0.0f), 1.0f);
  // The group maximum maps to 448 (or saturates there after the scale's rounding).
  for (const float amax : {3.0f, 0.1f, 1e-3f, 77.7f, 1e30f}) {
    EXPECT_EQ(fp8_act_quant(amax, fp8_act_scale(amax)), 0x7e) << amax;
    EXPECT_EQ(fp8_act_quant(-amax, fp8_act_scale(amax)), 0xfe) << amax;
  }
  // Values: e4m3(v / scale) with the codec's ties to even: 1.0625 * 2^4 -> 16.
  EXPECT_EQ(fp8_act_quant(17.0f, 1.0f), 0x58);
  EXPECT_EQ(fp8_act_quant(0.5f, 0.25f), f32_to_e4m3_bits(2.0f));
  // amax: order independent, NaN sticky, sign ignored.
  float m = 0.0f;
  for (const float v : {0.5f, -2.0f, 1.0f}) m = fp8_amax_step(m, v);
  EXPECT_EQ(m, 2.0f);
  EXPECT_TRUE(std::isnan(fp8_amax_step(fp8_amax_step(0.0f, NAN), 5.0f)));
  EXPECT_TRUE(std::isnan(fp8_amax_step(5.0f, NAN)));
  EXPECT_EQ(fp8_block_scale(0.5f, 0.25f), 0.125f);
  EXPECT_EQ(fp8_compute_from_name("w8a8", "--fp8-compute"), Fp8Compute::W8A8);
  EXPECT_EQ(fp8_compute_from_name("w8a16", "--fp8-compute"), Fp8Compute::W8A16);
  EXPECT_TRUE(test::throws_with([] { (void)fp8_compute_from_name("w4a8", "--fp8-compute"); },
                                {"--fp8-compute", "w8a16", "w8a8", "w4a8"}));
}

// The multiplying quantiser the device uses (fp8_act_quant_rcp) gives the
// dividing one's bytes: at and next to every e4m3 rounding boundary (where
// its window sends it to the division), on random groups, and on the edges
// (zero, NaN, a tiny scale whose reciprocal overflows, saturation). Here its
// rounding is the software one; test_cuda_fp8_w8a8 runs the hardware's.
TEST(Fp8Activations, MultiplyingQuantiserGivesTheDividingOnesBytes) {
  std::mt19937 g(7);
  std::uniform_int_distribution<uint32_t> mant(0, 0x7fffff);
  std::uniform_int_distribution<int> ex(-30, 30);
  std::uniform_real_distribution<float> frac(0.0f, 1.0f);
  int64_t checked = 0, differ = 0;
  auto check = [&](float v, float sc) {
    ++checked;
    differ += fp8_act_quant_rcp(v, sc, fp8_act_rcp(sc)) != fp8_act_quant(v, sc) ? 1 : 0;
  };
  for (int i = 0; i < 64; ++i) {
    const float sc = std::ldexp(1.0f + static_cast<float>(mant(g)) / 8388608.0f, ex(g) - 9);
    for (int e = 1; e < 0x7f; ++e) {
      const float lo = e4m3_bits_to_f32(static_cast<uint8_t>(e - 1)), hi = e4m3_bits_to_f32(static_cast<uint8_t>(e));
      for (const float target : {hi, 0.5f * (lo + hi)}) {
        uint32_t c;
        const float at = target * sc;
        std::memcpy(&c, &at, 4);
        for (int d = -17; d <= 17; ++d) {
          const uint32_t b = c + static_cast<uint32_t>(d);
          float v;
          std::memcpy(&v, &b, 4);
          check(v, sc);
          check(-v, sc);
        }
      }
    }
    for (int j = 0; j < 2000; ++j) {
      const float amax = std::ldexp(1.0f + static_cast<float>(mant(g)) / 8388608.0f, ex(g));
      check(amax * frac(g), fp8_act_scale(amax));
      check(amax, fp8_act_scale(amax));
    }
  }
  EXPECT_EQ(differ, 0) << "of " << checked;
  const float tiny = std::ldexp(1.0f, -140);  // 1 / tiny overflows to +inf
  for (const float v : {0.0f, -0.0f, 1e-45f, 3.0f, -3.0f, NAN, 500.0f, 1e30f})
    for (const float sc : {1.0f, tiny, 3.0f / 448.0f, NAN})
      EXPECT_EQ(fp8_act_quant_rcp(v, sc, fp8_act_rcp(sc)), fp8_act_quant(v, sc)) << v << " / " << sc;
}

struct Case {
  int mh, ne, k;
  int64_t dh, de, t;
};

// Outputs of the bf16 op on the original banks and of the W8A16 / W8A8 ops on
// their block-quantised copies, for the same routed rows.
struct Outputs {
  Tensor bf16, w8a16, w8a8;
};

Outputs run_three(const Case& c, uint32_t seed) {
  // G and U of standard deviation ~3 (both cross the +-7 clamps), as the CUDA parity tests.
  const float a = 3.f / std::sqrt(static_cast<float>(c.dh)), s = 0.85f / std::sqrt(static_cast<float>(c.de));
  const int64_t nf = static_cast<int64_t>(c.mh) * c.ne;
  const Tensor wg = random_bf16({nf, c.dh, c.de}, a, seed + 1), wu = random_bf16({nf, c.dh, c.de}, a, seed + 2);
  const Tensor wd = random_bf16({nf, c.de, c.dh}, s, seed + 3);
  const Fp8Blocks qg = quantize_fp8_blocks(wg, "W_gate"), qu = quantize_fp8_blocks(wu, "W_up"),
                  qd = quantize_fp8_blocks(wd, "W_down");
  const Tensor r = random_bf16({c.t, c.mh * c.dh}, 0.8f, seed + 4);
  std::vector<int32_t> idx;
  std::vector<float> wt;
  std::mt19937 g(seed + 5);
  std::uniform_real_distribution<float> u(0.1f, 1.5f);
  for (int h = 0; h < c.mh; ++h)
    for (int64_t n = 0; n < c.t; ++n)
      for (int j = 0; j < c.k; ++j) {
        idx.push_back(static_cast<int32_t>((n * 7 + 3 * j + h) % c.ne));
        wt.push_back(u(g));
      }
  const Tensor ti = Tensor::from_i32({c.mh, c.t, c.k}, idx), tw = Tensor::from_f32({c.mh, c.t, c.k}, wt);
  auto be = make_cpu_backend();
  const Shape os{c.t, c.mh * c.dh};
  Outputs o{Tensor::zeros(os, DType::BF16), Tensor::zeros(os, DType::BF16), Tensor::zeros(os, DType::BF16)};
  be->moe_experts({.r = r, .w_gate = wg, .w_up = wu, .w_down = wd, .idx = ti, .weight = tw, .out = o.bf16,
                   .num_heads = c.mh, .num_experts = c.ne, .top_k = c.k});
  for (const Fp8Compute m : {Fp8Compute::W8A16, Fp8Compute::W8A8})
    be->moe_experts({.r = r, .w_gate = qg.q, .w_up = qu.q, .w_down = qd.q, .w_gate_scale = qg.scale_inv,
                     .w_up_scale = qu.scale_inv, .w_down_scale = qd.scale_inv, .idx = ti, .weight = tw,
                     .out = m == Fp8Compute::W8A8 ? o.w8a8 : o.w8a16, .num_heads = c.mh, .num_experts = c.ne,
                     .top_k = c.k, .fp8_compute = m});
  return o;
}

// Z's fixed factor (ops/numerics.h fp8_z_factor): SwiGLU7 of any fp32 pair,
// including the clamps' edges, huge values and infinities, stays below 56 in
// magnitude, so 8 Z never reaches e4m3's 448; and the factor's edge cases.
TEST(Fp8W8a8, SwiGLU7IsBoundedSoZNeedsNoGroupScale) {
  const float edge[] = {-INFINITY, -1e30f, -100.f, -7.f, -1.f, -0.75f, -0.6f, 0.f, 0.5f, 6.99f, 7.f, 7.01f, 1e30f,
                        INFINITY};
  float zmax = 0.f;
  auto take = [&](float g, float u) {
    const float z = swiglu7_f32(g, u, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
    if (std::isnan(z)) return;
    zmax = std::max(zmax, std::fabs(z));
  };
  for (float g : edge)
    for (float u : edge) take(g, u);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-12.f, 12.f);
  for (int i = 0; i < 200000; ++i) take(d(rng), d(rng));
  EXPECT_LT(zmax, 56.f);
  EXPECT_LE(kFp8ZFactor * zmax, kE4m3Max);
  // The factor: 8 for the column's largest scale, smaller (never above 8) for the others, 0 for an
  // all-zero column block, NaN for a NaN one; the unscale undoes 8 exactly.
  EXPECT_EQ(fp8_z_factor(3e-4f, 3e-4f), 8.f);
  EXPECT_EQ(fp8_z_factor(1.5e-4f, 3e-4f), 4.f);
  EXPECT_LE(fp8_z_factor(2.9999e-4f, 3e-4f), 8.f);
  EXPECT_EQ(fp8_z_factor(0.f, 0.f), 0.f);
  EXPECT_TRUE(std::isnan(fp8_z_factor(1e-4f, NAN)));
  EXPECT_EQ(fp8_z_unscale(3e-4f) * 8.f, 3e-4f);
}

// At the release widths: W8A8 adds the activation rounding (3 mantissa bits
// per element, 1 x 128 groups) to W8A16's weight rounding.
TEST(Fp8W8a8, AccuracyAtTheReleaseWidthBesideW8a16AndBf16) {
  const Case c{.mh = 2, .ne = 8, .k = 6, .dh = 256, .de = 1280, .t = 24};
  const Outputs o = run_three(c, 11);
  const double a16 = test::compare(o.w8a16, o.bf16).rel_rms, a8 = test::compare(o.w8a8, o.bf16).rel_rms;
  const double a8_16 = test::compare(o.w8a8, o.w8a16).rel_rms;
  std::printf("  d_head 256, d_expert 1280, top-6, random weights: rel-RMS W8A16 vs bf16 %.4f, W8A8 vs bf16 %.4f, "
              "W8A8 vs W8A16 %.4f\n", a16, a8, a8_16);
  EXPECT_GT(a8_16, 0.0);  // the option takes effect
  EXPECT_LT(a16, 0.06);
  EXPECT_LT(a8, 0.12);
  EXPECT_LT(a8_16, 0.10);
}

// Widths that are not multiples of 128 (the tiny model's): the last
// activation group of a row is shorter; the CPU reference handles any width.
TEST(Fp8W8a8, PartialGroupsStayClose) {
  const Case c{.mh = 2, .ne = 4, .k = 2, .dh = 48, .de = 200, .t = 9};
  const Outputs o = run_three(c, 21);
  const double a8_16 = test::compare(o.w8a8, o.w8a16).rel_rms;
  std::printf("  d_head 48, d_expert 200: rel-RMS W8A8 vs W8A16 %.4f\n", a8_16);
  EXPECT_GT(a8_16, 0.0);
  EXPECT_LT(a8_16, 0.10);
}

}  // namespace
}  // namespace magi2
