// `magi2 make-random` (src/engine/random_model.*): the release-width layout it
// plans (checked from the configs alone: a 2-layer folder is ~16 GB), and the
// same writer run end to end at shrunk widths: the folder binds with the real
// loaders, plans with --dry-run, and generates a clip on the CPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/model_files.h"
#include "engine/random_model.h"
#include "engine/tiny_model.h"
#include "engine/tiny_text_encoder.h"
#include "io/mmap_file.h"
#include "models/magi2_refiner/config.h"
#include "models/qwen35/text_config.h"
#include "models/turbovae/tiny.h"
#include "util/cli.h"

namespace magi2::test {
namespace {

namespace fs = std::filesystem;

// The release's layer kinds survive every cut, widths untouched.
TEST(MakeRandom, DitCutsKeepTheReleaseLayerKindsAndWidths) {
  const DitArch rel = Magi2Config::release().arch;
  std::vector<int> from;
  DitArch a = random_model_dit_arch(1, &from);
  EXPECT_EQ(a.moe_layers, std::vector<int>({0}));
  EXPECT_TRUE(a.mm_layers.empty());
  EXPECT_EQ(from, std::vector<int>({2}));
  a = random_model_dit_arch(2, &from);
  EXPECT_EQ(a.mm_layers, std::vector<int>({0}));
  EXPECT_EQ(a.moe_layers, std::vector<int>({1}));
  EXPECT_EQ(from, std::vector<int>({0, 2}));
  a = random_model_dit_arch(4, &from);
  EXPECT_EQ(a.mm_layers, std::vector<int>({0, 3}));
  EXPECT_EQ(a.moe_layers, std::vector<int>({1, 2}));
  EXPECT_EQ(from, std::vector<int>({0, 2, 3, 39}));
  a = random_model_dit_arch(40, &from);
  EXPECT_EQ(a.mm_layers, rel.mm_layers);
  EXPECT_EQ(a.moe_layers, rel.moe_layers);
  for (int l = 0; l < 40; ++l) EXPECT_EQ(from[static_cast<size_t>(l)], l);
  EXPECT_EQ(a.hidden_size, 3072);
  EXPECT_EQ(a.virtual_width(), 12288);
  EXPECT_EQ(a.moe_num_heads, 12);
  EXPECT_EQ(a.moe_num_experts, 256);
  EXPECT_EQ(a.text_in_channels, 5120);
  // The one MoE layer's expert bank at the release shape [heads * experts, d_head, d_expert].
  bool bank = false;
  for (const DitTensorSpec& s : dit_tensor_specs(random_model_dit_arch(1)))
    if (s.name == "block.layers.0.mlp.moe_mlp.W_gate") bank = s.shape == Shape({3072, 256, 1280});
  EXPECT_TRUE(bank);
}

TEST(MakeRandom, ConfigsReadBackWithTheRealParsers) {
  const RandomModelLayout l = random_model_layout({.layers = 2, .text_layers = 4, .refiner_layers = 2});
  const std::string text = random_model_config_json(l);
  const Magi2Config c = Magi2Config::from_json_text(text, "make-random config");
  EXPECT_EQ(c.arch.num_layers, 2);
  EXPECT_EQ(c.arch.mm_layers, l.dit.mm_layers);
  EXPECT_EQ(c.arch.moe_layers, l.dit.moe_layers);
  EXPECT_EQ(c.arch.hidden_size, 3072);
  EXPECT_EQ(c.arch.moe_expert_intermediate_size, 1280);
  EXPECT_EQ(c.eval.num_inference_steps, Magi2Config::release().eval.num_inference_steps);
  EXPECT_EQ(c.engine.load, "preview");
  const RefinerConfig r = RefinerConfig::from_json_text(text, "make-random config");
  EXPECT_EQ(r.arch.num_layers, 2);
  EXPECT_EQ(r.arch.hidden_size, 4096);
  // No refiner: no refiner section (the built-in release values apply, and refiner/ is absent).
  const std::string no_ref = random_model_config_json(random_model_layout({.layers = 1}));
  EXPECT_FALSE(nlohmann::json::parse(no_ref).contains("magi2_refiner_arch_config"));

  // The text encoder: the 27B widths, both layer kinds among the feature layers, the tiny tokenizer's ids fit.
  const qwen35::TextConfig t = qwen35::TextConfig::from_json_text(text_encoder_config_json(l.text), "te");
  EXPECT_EQ(t.hidden_size, 5120);
  EXPECT_EQ(t.vocab_size, 248320);
  EXPECT_EQ(t.num_hidden_layers, 4);
  EXPECT_EQ(t.full_attention, std::vector<bool>({false, true, false, true}));
  EXPECT_EQ(t.head_dim, 256);
  EXPECT_EQ(t.linear_num_value_heads, 48);
  const auto tj = nlohmann::json::parse(text_encoder_config_json(l.text));
  EXPECT_LT(tj["eos_token_id"].get<int>(), t.vocab_size);
}

TEST(MakeRandom, BadCountsNameTheirFlag) {
  EXPECT_TRUE(throws_with([] { random_model_layout({.layers = 0}); }, {"--layers", "[1, 40]"}));
  EXPECT_TRUE(throws_with([] { random_model_layout({.layers = 41}); }, {"--layers"}));
  EXPECT_TRUE(throws_with([] { random_model_layout({.text_layers = 2}); }, {"--text-layers", "hidden_states[-3]"}));
  EXPECT_TRUE(throws_with([] { random_model_layout({.refiner_layers = 31}); }, {"--refiner-layers"}));
  expect_one_line_error(magi2("make-random " + temp_dir("mr_cli") + "/m --layers 0"), "--layers");
}

// The release layout with every width shrunk to the tiny model's (the test
// override: the release widths do not fit a CI machine), layer kinds kept.
RandomModelLayout shrunk(bool fp8) {
  RandomModelLayout l = random_model_layout({.layers = 2, .text_layers = 4, .refiner_layers = 2, .fp8_experts = fp8});
  DitArch small = tiny_config().arch;
  small.num_layers = l.dit.num_layers;
  small.mm_layers = l.dit.mm_layers;
  small.moe_layers = l.dit.moe_layers;
  l.dit = small;
  qwen35::TextConfig t = qwen35::TextConfig::from_json_text(tiny_text_config_json(), "tiny");
  t.num_hidden_layers = l.text.num_hidden_layers;
  t.full_attention = l.text.full_attention;
  l.text = t;
  l.turbo_vae = tiny_turbo_vae_config();
  l.sao_channels = 4;
  l.wan = Wan22VaeLayout{};
  l.refiner.hidden_size = 64;
  l.refiner.head_dim = 32;
  l.refiner.num_query_groups = 1;
  l.refiner.text_in_channels = 64;
  return l;
}

TEST(MakeRandom, ShrunkFolderLoadsPlansAndGenerates) {
  const std::string root = temp_dir("make_random"), dir = root + "/model";
  const RandomModelSummary s = make_random_model(dir, shrunk(true), 5);
  EXPECT_GT(s.folder_bytes, 0u);
  ASSERT_EQ(s.parts.size(), 6u);
  for (const char* f : {"config.json", "preview/model.safetensors.index.json", "preview/model-00001-of-00003.safetensors",
                        "preview/model-00003-of-00003.safetensors", "text_encoder/tokenizer.json",
                        "text_encoder/model.safetensors", "turbo_vae/checkpoint.ckpt", "stable-audio-open-1.0/model.safetensors",
                        "vae/Wan2.2_VAE.pth", "refiner/model.safetensors.index.json"})
    EXPECT_TRUE(fs::is_regular_file(fs::path(dir) / f)) << f;
  const LoadedDit d = load_dit(dir, "", "");
  EXPECT_TRUE(d.weights.fp8_experts());
  EXPECT_EQ(d.config.arch.moe_layers, std::vector<int>({1}));
  // A second run into the same folder refuses and leaves it as it was.
  EXPECT_TRUE(throws_with([&] { make_random_model(dir, shrunk(false), 5); }, {dir, "not empty"}));

  const std::string gen = "generate --model " + dir + " --prompt 'A red fox.' --device cpu --seconds 1 --width 64 "
                          "--height 32 --num-inference-steps 2 --text-encoder-device cpu ";
  CliRun r = magi2(gen + "--dry-run --save-latents " + root + "/l.safetensors");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("memory plan"), std::string::npos) << r.out;
  r = magi2(gen + "--save-frames " + root + "/frames --save-audio " + root + "/a.wav --metrics " + root + "/m.json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(fs::is_regular_file(root + "/frames/frame_00000.png"));
  EXPECT_TRUE(fs::is_regular_file(root + "/a.wav"));
  const auto m = nlohmann::json::parse(read_text_file(root + "/m.json"));
  EXPECT_TRUE(m.contains("phase_ms")) << m.dump();
  std::error_code ec;
  fs::remove_all(root, ec);
}

}  // namespace
}  // namespace magi2::test
