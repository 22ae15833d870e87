// The refiner transformer against the official code's tiny fixture
// (tests/fixtures/refiner_tiny, made on the CPU by tools/oracle/make_golden_refiner.py):
// config, strict binding, packing and attention pairs exactly, the forward and
// its intermediates at the bf16 floor. Sizes come from the fixture files.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/magi2_refiner/config.h"
#include "models/magi2_refiner/refiner.h"
#include "models/magi2_refiner/tokens.h"
#include "models/magi2_refiner/weights.h"
#include "ops/ops.h"
#include "util/testing.h"

namespace magi2 {
namespace {

struct GoldenRefiner {
  RefinerConfig config;
  Checkpoint ckpt;
  RefinerWeights weights;
  std::shared_ptr<SafetensorsFile> io;
  static GoldenRefiner& get() {
    static GoldenRefiner g = [] {
      const std::string dir = test::fixture_dir() + "/refiner_tiny";
      GoldenRefiner x{RefinerConfig::from_file(dir + "/config.json"), Checkpoint::open(dir + "/refiner"), {}, nullptr};
      x.weights = RefinerWeights::bind(x.ckpt, x.config.arch);
      x.io = SafetensorsFile::open(dir + "/refiner_io.safetensors");
      return x;
    }();
    return g;
  }
  // The layout of the fixture's first forward (step 0, conditional branch).
  RefinerLayout layout(bool with_audio) const {
    const Tensor lat = io->tensor("interp_latent");
    RefinerLayout L;
    L.frames = lat.size(2);
    L.height = lat.size(3);
    L.width = lat.size(4);
    L.text_len = io->tensor("txt_feat").size(1);
    L.audio_len = with_audio ? io->tensor("preview_audio_latent").size(1) : 0;
    return L;
  }
};

void expect_equal_i32(const Tensor& a, const Tensor& b, const std::string& what) {
  const Tensor x = a.to(DType::I32), y = b.to(DType::I32);
  ASSERT_EQ(x.shape(), y.shape()) << what;
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0) << what;
}

TEST(RefinerGolden, BindsEveryOfficialTensor) {
  auto& g = GoldenRefiner::get();
  EXPECT_EQ(g.weights.num_tensors, g.ckpt.names().size());
}

TEST(RefinerGolden, PlanMatchesTheDataProxy) {
  auto& g = GoldenRefiner::get();
  const RefinerPlan p = make_refiner_plan(g.layout(false), g.config.arch, g.config.eval.window);
  expect_equal_i32(Tensor::from_i32({static_cast<int64_t>(p.token_order.size())}, p.token_order),
                   g.io->tensor("fwd_token_order"), "token order");
  expect_equal_i32(p.q_ranges, g.io->tensor("fwd_q_ranges"), "q ranges");
  expect_equal_i32(p.k_ranges, g.io->tensor("fwd_k_ranges"), "k ranges");
  expect_equal_i32(p.modality, g.io->tensor("fwd_modality"), "modality");
  EXPECT_EQ(test::compare(p.coords, g.io->tensor("fwd_coords")).max_abs, 0.0);
  const Tensor x = pack_refiner_tokens(p, g.io->tensor("loop_s0_latent_in"), Tensor(), g.io->tensor("txt_feat"),
                                       g.config.arch.video_in_channels, g.config.arch.audio_in_channels);
  EXPECT_EQ(test::compare(x, g.io->tensor("fwd_x")).max_abs, 0.0);
}

TEST(RefinerGolden, ForwardAndIntermediatesAtTheBf16Floor) {
  auto& g = GoldenRefiner::get();
  const RefinerPlan p = make_refiner_plan(g.layout(false), g.config.arch, g.config.eval.window);
  auto be = make_cpu_backend();
  Refiner model(g.config.arch, g.weights, *be);
  std::map<std::string, Tensor> got;
  const Tensor out = model.forward(p, g.io->tensor("fwd_x"), [&](const std::string& n, const Tensor& t) { got[n] = t; });
  // Exact up to fp32 summation order before the first bf16 rounding.
  for (const char* name : {"rope", "pre_adapter_x"})
    EXPECT_LT(test::compare(got.at(name), g.io->tensor(std::string("fwd_") + name)).rel_rms, 1e-6) << name;
  // The bf16 floor of each tensor: the official bf16 run against its own
  // fp32-upcast re-run (fixture *_fp32). We stay within twice of it.
  auto floor_of = [&](const std::string& name) {
    return test::compare(g.io->tensor("fwd_" + name), g.io->tensor("fwd_" + name + "_fp32")).rel_rms;
  };
  for (int l = 0; l < g.config.arch.num_layers; ++l)
    for (const std::string k : {"_attn_out", "_out"}) {
      std::string name = "l";  // appended, not operator+: g++ 12 warns falsely (-Wrestrict) on "l" + std::string
      name += std::to_string(l);
      name += k;
      const double err = test::compare(got.at(name), g.io->tensor("fwd_" + name)).rel_rms;
      std::printf("%-12s rel_rms %.5f (bf16 floor %.5f)\n", name.c_str(), err, floor_of(name));
      EXPECT_LT(err, 2 * floor_of(name) + 1e-4) << name;
    }
  const double err = test::compare(out, g.io->tensor("fwd_out")).rel_rms;
  std::printf("out          rel_rms %.5f (bf16 floor %.5f)\n", err, floor_of("out"));
  EXPECT_LT(err, 2 * floor_of("out"));
  const Tensor video = unpack_refiner_video(p, out, g.config.arch.video_in_channels);
  EXPECT_LT(test::compare(video, g.io->tensor("loop_s0_cond_video")).rel_rms, 2 * floor_of("out"));
}

TEST(RefinerGolden, ForwardWithAudioTokens) {
  auto& g = GoldenRefiner::get();
  const RefinerPlan p = make_refiner_plan(g.layout(true), g.config.arch, g.config.eval.window);
  expect_equal_i32(p.modality, g.io->tensor("audio_fwd_modality"), "modality");
  EXPECT_EQ(test::compare(p.coords, g.io->tensor("audio_fwd_coords")).max_abs, 0.0);
  const Tensor x = pack_refiner_tokens(p, g.io->tensor("interp_latent"), g.io->tensor("preview_audio_latent"),
                                       g.io->tensor("txt_feat"), g.config.arch.video_in_channels,
                                       g.config.arch.audio_in_channels);
  EXPECT_EQ(test::compare(x, g.io->tensor("audio_fwd_x")).max_abs, 0.0);
  auto be = make_cpu_backend();
  Refiner model(g.config.arch, g.weights, *be);
  const double floor = test::compare(g.io->tensor("fwd_out"), g.io->tensor("fwd_out_fp32")).rel_rms;
  EXPECT_LT(test::compare(model.forward(p, x), g.io->tensor("audio_fwd_out")).rel_rms, 2 * floor);
}

TEST(RefinerGolden, RejectsAMismatchedCheckpoint) {
  auto& g = GoldenRefiner::get();
  RefinerArch other = g.config.arch;
  other.num_layers += 1;
  other.local_attn_layers.push_back(other.num_layers - 1);
  EXPECT_TRUE(test::throws_with([&] { RefinerWeights::bind(g.ckpt, other); },
                                {"does not match the refiner config", "missing", "block.layers."}));
}

}  // namespace
}  // namespace magi2
