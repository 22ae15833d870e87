// Natural (not teacher-forced) routing against the official selection, and
// bit-exact determinism of the DiT forward across thread counts and runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "golden/dit_fixture.h"

namespace magi2::test {
namespace {

class DitRouting : public ::testing::TestWithParam<std::string> {};

// MoE layer l runs with natural routing; earlier MoE layers are forced to the
// golden selection so that l sees the official inputs up to bf16 noise.
TEST_P(DitRouting, NaturalSelectionAgreesWhereMarginIsClear) {
  GoldenDit& g = GoldenDit::get();
  const std::string px = GetParam();
  auto be = make_cpu_backend();
  Dit dit(g.config.arch, g.weights, *be);
  const auto& a = g.config.arch;
  for (int l : a.moe_layers) {
    Tensor ours;
    dit.forward(g.inputs(px), g.natural_routing_at(px, l, &ours));
    ASSERT_TRUE(ours.defined());
    const std::string ln = str_cat(px, "l", l);
    Tensor gold = g.io->tensor(ln + "_moe_topk_idx").to(DType::I32);
    Tensor margin = g.io->tensor(ln + "_moe_select_margin");
    const int64_t heads = gold.size(0), n = gold.size(1), k = gold.size(2);
    int64_t agree = 0, clear = 0, clear_agree = 0;
    double worst_clear_margin = 0;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < n; ++t) {
        const int32_t* a_ = ours.data_as<int32_t>() + (h * n + t) * k;
        const int32_t* b_ = gold.data_as<int32_t>() + (h * n + t) * k;
        std::set<int32_t> sa(a_, a_ + k), sb(b_, b_ + k);
        const bool same = sa == sb;
        agree += same;
        if (margin.data_as<float>()[h * n + t] > 0.01f) {
          ++clear;
          clear_agree += same;
          if (!same) worst_clear_margin = std::max<double>(worst_clear_margin, margin.data_as<float>()[h * n + t]);
        }
      }
    std::printf("  %s: %lld/%lld (head, token) sets agree; %lld/%lld with margin > 0.01\n", ln.c_str(),
                (long long)agree, (long long)(heads * n), (long long)clear_agree, (long long)clear);
    EXPECT_EQ(clear_agree, clear) << ln << " worst disagreeing margin " << worst_clear_margin;
    EXPECT_GE(static_cast<double>(agree) / static_cast<double>(heads * n), 0.9) << ln;
  }
}

INSTANTIATE_TEST_SUITE_P(T2vI2v, DitRouting, ::testing::Values("t2v_", "i2v_"));

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(DitDeterminism, SameBytesAcrossThreadCountsAndRuns) {
  GoldenDit& g = GoldenDit::get();
  std::vector<Tensor> outs;
  for (int threads : {1, 2, 2}) {
    auto be = make_cpu_backend(threads);
    Dit dit(g.config.arch, g.weights, *be);
    outs.push_back(dit.forward(g.inputs("i2v_")).clone());  // natural routing
  }
  EXPECT_TRUE(same_bytes(outs[0], outs[1])) << "1 vs 2 threads";
  EXPECT_TRUE(same_bytes(outs[1], outs[2])) << "two runs";
}

TEST(DitDeterminism, WorkspaceReuseGivesSameBytes) {
  GoldenDit& g = GoldenDit::get();
  auto be = make_cpu_backend();
  Dit dit(g.config.arch, g.weights, *be);
  Tensor a = dit.forward(g.inputs("t2v_")).clone();
  dit.forward(g.inputs("i2v_"));  // different N: re-plans the workspace
  Tensor b = dit.forward(g.inputs("t2v_")).clone();
  Tensor c = dit.forward(g.inputs("t2v_")).clone();  // same N: reuses it
  EXPECT_TRUE(same_bytes(a, b));
  EXPECT_TRUE(same_bytes(b, c));
}

}  // namespace
}  // namespace magi2::test
