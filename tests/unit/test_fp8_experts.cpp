// FP8 routed experts (docs/fp8.md): the e4m3 codec against torch's values, the
// 128 x 128 block quantiser, and the CPU W8A16 expert op = the bf16 op on the
// dequantised banks, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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

}  // namespace
}  // namespace magi2
