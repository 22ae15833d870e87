// CUDA mHC (spec magi2-dit.md §9) and multi-head MoE (§8.2-8.4) ops against
// the CPU reference backend on random inputs: the golden tiny shapes (hidden
// 256, 4 MoE heads x 16 experts of width 64, top-4) and DiT-like larger ones
// (D = 3072; 12 heads x 256 experts of d_head 256 for the router; d_expert
// 1280, top-6 for the experts). Every output must match bit for bit
// (docs/cuda.md). Skips when no GPU is present (CI).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cuda/backend_cuda.h"
#include "cuda/mhc_moe.h"
#include "cuda_fixture.h"
#include "ops/ops.h"

namespace magi2 {
namespace {

using test::count_diff;
using test::plant_route_ties;
using test::print_route_case;
using test::RouteCase;

class CudaMhcMoeTest : public test::CudaParityTest {
 protected:
  CudaMhcMoeTest() : CudaParityTest(1234) {}
  /// These tests judge the bit-exact reference kernels; the default mHC and
  /// router kernels are the fused ones (test_cuda_fused judges those), and the
  /// switch is read once per process, so it is pinned before any op runs.
  static void SetUpTestSuite() {
    setenv("MAGI2_MHC_KERNEL", "reference", 1);
    setenv("MAGI2_ROUTER_KERNEL", "reference", 1);
  }
  /// CPU tensor of uniform values in [lo, hi) rounded to the dtype (splitmix64:
  /// fast enough for the 100 M-element expert banks).
  Tensor uniform(const Shape& shape, DType dt, float lo, float hi) {
    Tensor t = Tensor::empty(shape, dt);
    for (int64_t i = 0; i < t.numel(); ++i) {
      uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      const float v = lo + (hi - lo) * static_cast<float>((z >> 40) * 0x1p-24);
      if (dt == DType::F32)
        t.data_as<float>()[i] = v;
      else
        t.data_as<uint16_t>()[i] = f32_to_bf16_bits(v);
    }
    return t;
  }
  uint64_t state_ = 12345;
};

// ---- mHC -----------------------------------------------------------------------

struct MhcCase {
  int64_t t, d;
  int groups;
};

TEST_F(CudaMhcMoeTest, MhcMatchesCpuBitForBit) {
  for (const MhcCase mc : {MhcCase{127, 256, 1}, MhcCase{300, 3072, 3}}) {
    const int64_t t = mc.t, d = mc.d, vw = 4 * d;
    Groups g = Groups::single(t);
    if (mc.groups == 3) g.cu = {0, 150, 250, t}, g.count = 3;
    const float c = 1.0f / std::sqrt(static_cast<float>(vw));
    Tensor state = uniform({t, vw}, DType::BF16, -3.f, 3.f);
    Tensor norm_w = uniform({mc.groups * vw}, DType::F32, -0.2f, 0.2f);
    Tensor phi = uniform({vw, 24}, DType::F32, -1.7f, 1.7f);
    MhcBranchWeights wc{.alpha_pre = uniform({1}, DType::F32, 0.3f, 1.5f),
                        .alpha_post = uniform({1}, DType::F32, 0.3f, 1.5f),
                        .alpha_res = uniform({1}, DType::F32, 0.3f, 3.f),
                        .bias_pre = uniform({4}, DType::F32, -1.f, 1.f),
                        .bias_post = uniform({4}, DType::F32, -1.f, 1.f),
                        .bias_res = uniform({4, 4}, DType::F32, -2.f, 2.f)};
    MhcBranchWeights wg{.alpha_pre = up(wc.alpha_pre), .alpha_post = up(wc.alpha_post),
                        .alpha_res = up(wc.alpha_res), .bias_pre = up(wc.bias_pre),
                        .bias_post = up(wc.bias_post), .bias_res = up(wc.bias_res)};
    const Tensor state_g = up(state);
    char tag[64];
    std::snprintf(tag, sizeof tag, "D=%lld T=%lld", static_cast<long long>(d), static_cast<long long>(t));
    std::printf("[%s]\n", tag);

    Tensor lc = Tensor::empty({t, 24}, DType::F32), lg = poisoned({t, 24}, DType::F32);
    cpu_->mhc_logits({.state = state, .norm_w = norm_w, .phi = phi, .logits = lc, .groups = g});
    gpu_->mhc_logits({.state = state_g, .norm_w = up(norm_w), .phi = up(phi), .logits = lg, .groups = g});
    EXPECT_EQ(count_diff(down(lg), lc, "mhc_logits"), 0);
    const Tensor logits_g = up(lc);  // the CPU's logits feed both backends below

    // a as a column slice of a wider buffer (row-strided output).
    Tensor ac = Tensor::empty({t, d}, DType::BF16), hc = Tensor::empty({t, 4}, DType::F32);
    Tensor ag = poisoned({t, d + 8}, DType::BF16), hg = poisoned({t, 4}, DType::F32);
    cpu_->mhc_pre({.state = state, .logits = lc, .w = &wc, .a = ac, .h_pre = hc, .c = c});
    gpu_->mhc_pre({.state = state_g, .logits = logits_g, .w = &wg, .a = ag.slice_cols(8, d + 8), .h_pre = hg, .c = c});
    EXPECT_EQ(count_diff(down(ag.slice_cols(8, d + 8)), ac, "mhc_pre a"), 0);
    EXPECT_EQ(count_diff(down(hg), hc, "mhc_pre h_pre"), 0);

    Tensor o = uniform({t, d}, DType::BF16, -4.f, 4.f);
    Tensor sc = state.clone(), pc = Tensor::empty({t, 4}, DType::F32), rc = Tensor::empty({t, 16}, DType::F32);
    Tensor pg = poisoned({t, 4}, DType::F32), rg = poisoned({t, 16}, DType::F32);
    cpu_->mhc_post_res({.state = sc, .o = o, .logits = lc, .w = &wc, .h_post = pc, .h_res = rc, .c = c});
    gpu_->mhc_post_res({.state = state_g, .o = up(o), .logits = logits_g, .w = &wg, .h_post = pg, .h_res = rg, .c = c});
    EXPECT_EQ(count_diff(down(state_g), sc, "mhc_post_res state"), 0);
    EXPECT_EQ(count_diff(down(pg), pc, "mhc_post_res h_post"), 0);
    EXPECT_EQ(count_diff(down(rg), rc, "mhc_post_res h_res"), 0);
    // Sanity of the inputs: the Sinkhorn result is far from uniform somewhere.
    float hmax = 0.f;
    for (int64_t i = 0; i < rc.numel(); ++i) hmax = std::max(hmax, rc.data_as<float>()[i]);
    EXPECT_GT(hmax, 0.5f);
  }
}

// ---- router ----------------------------------------------------------------------

TEST_F(CudaMhcMoeTest, MoeRouteMatchesCpuBitForBit) {
  for (const RouteCase rc : {RouteCase{127, 64, 4, 16, 4}, RouteCase{45, 40, 3, 20, 3}, RouteCase{1000, 256, 12, 256, 6}}) {
    const int64_t t = rc.t, dh = rc.dh;
    const int mh = rc.mh, ne = rc.ne, k = rc.k;
    print_route_case(rc);
    Tensor rb = uniform({t, mh * dh + 4}, DType::BF16, -2.f, 2.f);
    Tensor r = rb.slice_cols(4, 4 + mh * dh);
    const float a = 1.7f / std::sqrt(static_cast<float>(dh));
    Tensor gate = uniform({mh * ne, dh}, DType::F32, -a, a), bias = uniform({mh * ne}, DType::F32, -0.5f, 0.5f);
    // Head 0: zero gate rows (every score sigmoid(0) = 0.5 exactly) and bias
    // values with exact ties; head 1: two NaN selection scores (rank first).
    plant_route_ties(gate, bias, ne, dh);
    const Tensor forced = test::random_routes(mh, t, ne, k, 7);  // distinct experts, not in score order
    const Tensor r_g = up(rb).slice_cols(4, 4 + mh * dh), gate_g = up(gate), bias_g = up(bias),
                 forced_g = up(forced);
    for (int mode = 0; mode < 3; ++mode) {  // normalised, not normalised, forced
      const bool normalize = mode != 1, force = mode == 2;
      const auto [ic, wc, mc, ig, wg, mg] = route_outputs(mh, t, k);
      cpu_->moe_route({.r = r, .gate = gate, .bias = bias, .idx = ic, .weight = wc,
                       .forced_idx = force ? forced : Tensor(), .margin = mc, .num_heads = mh, .num_experts = ne,
                       .top_k = k, .route_scale = 4.9f, .normalize = normalize});
      gpu_->moe_route({.r = r_g, .gate = gate_g, .bias = bias_g, .idx = ig, .weight = wg,
                       .forced_idx = force ? forced_g : Tensor(), .margin = mg, .num_heads = mh, .num_experts = ne,
                       .top_k = k, .route_scale = 4.9f, .normalize = normalize});
      const char* m = force ? "forced" : normalize ? "normalised" : "not normalised";
      std::printf("  %s\n", m);
      EXPECT_EQ(count_diff(down(ig), ic, "    idx"), 0);
      EXPECT_EQ(count_diff(down(wg), wc, "    weight"), 0);
      EXPECT_EQ(count_diff(down(mg), mc, "    margin"), 0);
      if (mode == 0) {  // the tie rule did its work: head 0 picks the tied-highest bias ids in ascending order
        const int32_t* i0 = ic.data_as<int32_t>();
        EXPECT_LT(i0[0], i0[1]);
        EXPECT_EQ(ic.data_as<int32_t>()[static_cast<int64_t>(t) * k], 2);  // head 1, token 0: NaN ids first
        EXPECT_EQ(ic.data_as<int32_t>()[static_cast<int64_t>(t) * k + 1], 5);
      }
    }
  }
}

// ---- routed experts ----------------------------------------------------------------

struct ExpertCase {
  int64_t t, dh, de;
  int mh, ne, k;
};

// The scalar expert kernel (the grouped GEMM path is tested in test_cuda_moe_grouped.cpp).
TEST_F(CudaMhcMoeTest, MoeExpertsExactKernelMatchesCpuBitForBit) {
  for (const ExpertCase ec : {ExpertCase{127, 64, 64, 4, 16, 4}, ExpertCase{128, 256, 1280, 4, 16, 6}}) {
    const int64_t t = ec.t, dh = ec.dh, de = ec.de;
    const int mh = ec.mh, ne = ec.ne, k = ec.k;
    std::printf("[T=%lld heads=%d experts=%d d_head=%lld d_expert=%lld top-%d]\n", static_cast<long long>(t), mh, ne,
                static_cast<long long>(dh), static_cast<long long>(de), k);
    Tensor rb = uniform({t, mh * dh + 2}, DType::BF16, -1.5f, 1.5f), r = rb.slice_cols(2, 2 + mh * dh);
    // G and U of standard deviation ~3 so that both cross the +-7 clamps.
    const float a = 6.f / std::sqrt(static_cast<float>(dh)), b = 1.7f / std::sqrt(static_cast<float>(de));
    Tensor w_gate = uniform({mh * ne, dh, de}, DType::BF16, -a, a);
    Tensor w_up = uniform({mh * ne, dh, de}, DType::BF16, -a, a);
    Tensor w_down = uniform({mh * ne, de, dh}, DType::BF16, -b, b);
    Tensor weight = uniform({mh, t, k}, DType::F32, 0.1f, 2.f);
    Tensor idx = Tensor::empty({mh, t, k}, DType::I32);
    std::mt19937 rng(11);
    for (int64_t i = 0; i < mh * t; ++i) {
      std::vector<int32_t> p(ne);
      std::iota(p.begin(), p.end(), 0);
      std::shuffle(p.begin(), p.end(), rng);
      std::copy(p.begin(), p.begin() + k, idx.data_as<int32_t>() + i * k);
      if (i % 17 == 0) idx.data_as<int32_t>()[i * k + 1] = idx.data_as<int32_t>()[i * k];  // a repeated expert
    }
    Tensor oc = Tensor::empty({t, mh * dh}, DType::BF16);
    cpu_->moe_experts({.r = r, .w_gate = w_gate, .w_up = w_up, .w_down = w_down, .idx = idx, .weight = weight,
                       .out = oc, .num_heads = mh, .num_experts = ne, .top_k = k});
    Tensor og = poisoned({t, mh * dh + 4}, DType::BF16);
    const MoeExpertsParams pg{.r = up(rb).slice_cols(2, 2 + mh * dh), .w_gate = up(w_gate), .w_up = up(w_up),
                              .w_down = up(w_down), .idx = up(idx), .weight = up(weight),
                              .out = og.slice_cols(4, 4 + mh * dh), .num_heads = mh, .num_experts = ne, .top_k = k};
    const auto stream = static_cast<cudaStream_t>(cuda_stream_of(*gpu_));
    cuda::moe_experts(pg, nullptr, stream);
    const Tensor first = down(og.slice_cols(4, 4 + mh * dh));
    EXPECT_EQ(count_diff(first, oc, "moe_experts"), 0);
    cuda_synchronize(*gpu_);
    const auto t0 = std::chrono::steady_clock::now();
    cuda::moe_experts(pg, nullptr, stream);
    cuda_synchronize(*gpu_);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  second run %.3f ms (not asserted)\n", ms);
    EXPECT_EQ(count_diff(down(og.slice_cols(4, 4 + mh * dh)), first, "moe_experts run to run"), 0);
    int64_t finite = 0;  // a poisoned (unwritten) output would be NaN on both sides only by accident
    for (int64_t i = 0; i < oc.numel(); ++i) finite += std::isfinite(bf16_bits_to_f32(oc.data_as<uint16_t>()[i]));
    EXPECT_EQ(finite, oc.numel());
  }
}

TEST_F(CudaMhcMoeTest, BadInputIsRefusedWithOneLine) {
  auto throws_with = [](auto&& f, const char* what) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what()).find(what) != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(throws_with([&] { gpu_->moe_experts({}); }, "moe_experts: bad head/expert/top-k counts"));
  EXPECT_TRUE(throws_with([&] { gpu_->moe_route({}); }, "moe_route: bad head/expert/top-k counts"));
  EXPECT_TRUE(throws_with([&] { gpu_->mhc_pre({}); }, "mhc_pre: weights missing"));
  // Host tensors are refused (the ops never read host memory).
  Tensor state = uniform({4, 64}, DType::BF16, -1.f, 1.f), logits = Tensor::empty({4, 24}, DType::F32);
  EXPECT_TRUE(throws_with(
      [&] {
        gpu_->mhc_logits({.state = state, .norm_w = up(uniform({64}, DType::F32, 0.f, 1.f)),
                          .phi = up(uniform({64, 24}, DType::F32, 0.f, 1.f)), .logits = logits,
                          .groups = Groups::single(4)});
      },
      "expected a CUDA tensor"));
}

}  // namespace
}  // namespace magi2
