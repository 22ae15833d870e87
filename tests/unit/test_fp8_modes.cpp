// The FP8 modes of a run (engine/fp8_modes.h): the dense linears that
// --linear-compute fp8 quantises, known from the config alone, match the bound
// weights; what the CUDA backend cannot run is a pure function of the config,
// the modes and the backend name (the built-in tiny model's widths are no
// multiples of 128, the release's are), so it is checked here without a GPU;
// and the summary text and metrics keys name every mode.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/fp8_modes.h"
#include "engine/tiny_model.h"
#include "models/magi2_dit/weights.h"

namespace magi2 {
namespace {

Fp8Modes modes(const std::string& attention, const std::string& linears) {
  Fp8Modes m;
  m.attention_compute = attention;
  m.linear_compute = linears;
  return m;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Fp8Modes, LinearShapesFromTheConfigMatchTheWeights) {
  const DitArch a = tiny_config().arch;
  DitWeights w = DitWeights::generate(a, [](const DitTensorSpec& s) { return Tensor::zeros(s.shape, s.dtype); });
  std::vector<DitLinearShape> bound;
  for (DitLayerWeights& L : w.layers)
    for_each_fp8_linear(L, [&](const char* name, Tensor& t, Tensor&, int groups) {
      if (t.defined()) bound.push_back({L.index, name, t.size(1), t.size(0) / groups});
    });
  const std::vector<DitLinearShape> planned = dit_fp8_linear_shapes(a);
  ASSERT_EQ(planned.size(), bound.size());
  for (size_t i = 0; i < planned.size(); ++i) {
    EXPECT_EQ(planned[i].layer, bound[i].layer) << i;
    EXPECT_EQ(planned[i].name, bound[i].name) << i;
    EXPECT_EQ(planned[i].in, bound[i].in) << bound[i].name;
    EXPECT_EQ(planned[i].out, bound[i].out) << bound[i].name;
  }
  const DitLinearShape qkv = dit_fp8_linear_shapes(Magi2Config::release().arch).front();  // a copy: the vector is a temporary
  EXPECT_EQ(qkv.name, "linear_qkv");
  EXPECT_EQ(qkv.in, 3072);
  EXPECT_EQ(qkv.out, 3 * 3072);
}

TEST(Fp8Modes, TheTinyModelsWidthsAreRefusedOnCudaOnly) {
  const DitArch tiny = tiny_config().arch;
  const std::vector<std::string> p = fp8_backend_problems(tiny, modes("bf16", "fp8"), "cuda");
  ASSERT_EQ(p.size(), 1u);
  for (const char* part : {"--linear-compute fp8 on CUDA", "multiples of 128", "layer 0 linear_qkv: 64 -> 192",
                           "--device cpu", "--linear-compute bf16"})
    EXPECT_TRUE(contains(p[0], part)) << part << " missing in: " << p[0];
  EXPECT_TRUE(fp8_backend_problems(tiny, modes("bf16", "fp8"), "cpu").empty());  // the CPU takes any width
  EXPECT_TRUE(fp8_backend_problems(tiny, modes("bf16", "bf16"), "cuda").empty());
  const std::vector<std::string> both = fp8_backend_problems(tiny, modes("fp8", "fp8"), "cuda");
  ASSERT_EQ(both.size(), 2u);
  EXPECT_TRUE(contains(both[1], "--attention-compute fp8 on CUDA needs head dim 128")) << both[1];
  // The release's widths are multiples of 128 and its head dim is 128.
  EXPECT_TRUE(fp8_backend_problems(Magi2Config::release().arch, modes("fp8", "fp8"), "cuda").empty());
}

TEST(Fp8Modes, TextAndJsonNameEveryMode) {
  EngineOptions o;
  EXPECT_EQ(fp8_modes(o, false).text(), "experts bf16, attention bf16, linears bf16");
  o.fp8_compute = "w8a8";
  o.linear_compute = "fp8";
  const Fp8Modes m = fp8_modes(o, true);
  EXPECT_EQ(m.text(), "experts fp8 w8a8, attention bf16, linears fp8");
  const nlohmann::json j = m.json();
  EXPECT_EQ(j.at("weights"), "fp8-experts");
  EXPECT_EQ(j.at("fp8_compute"), "w8a8");
  EXPECT_EQ(j.at("attention_compute"), "bf16");
  EXPECT_EQ(j.at("linear_compute"), "fp8");
  EXPECT_EQ(fp8_modes(o, false).json().at("fp8_compute"), "none");  // bf16 experts: --fp8-compute is moot
}

}  // namespace
}  // namespace magi2
