// Magi2Config: the golden tiny config in the official JSON layout, the release
// defaults of spec magi2-dit.md §1.1-1.2, and errors that name the key and the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/magi2_dit/config.h"
#include "util/testing.h"

namespace magi2 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using test::throws_with;

const char* kSrc = "cfg_under_test.json";

// Parsing `j` fails with an error naming the source and every word.
::testing::AssertionResult rejects(const json& j, std::initializer_list<std::string> words) {
  auto r = throws_with([&] { Magi2Config::from_json_text(j.dump(), kSrc); }, words);
  if (!r) return r;
  return throws_with([&] { Magi2Config::from_json_text(j.dump(), kSrc); }, {kSrc});
}

// The golden tiny config's values, inline so the error tests do not need the fixture.
json tiny() {
  return json::parse(R"({
    "engine_config": {"seed": 0, "load": "ckpt", "cp_size": 1, "ep_size": 1},
    "arch_config": {
      "num_layers": 4, "hidden_size": 256, "head_dim": 64, "num_query_groups": 4,
      "video_in_channels": 48, "audio_in_channels": 64, "text_in_channels": 64,
      "params_dtype": "bfloat16", "intermediate_factor": 1, "mm_layers": [0, 3],
      "activation_type": "swiglu7", "attn_softcap": -1.0,
      "attn_gating": {"enable": true}, "attn_sinks": {"enable": true, "sink_token_num": 1},
      "mhc_config": {"enable": true, "num_stream": 4, "alpha_init": 0.01},
      "moe_config": {"num_experts": 16, "top_k": 4, "score_func": "sigmoid", "route_norm": true,
                     "route_scale": 4.9, "moe_layers": [1, 2], "expert_intermediate_size": 64,
                     "shared_expert_intermediate_size": 64,
                     "modality_specific_expert_intermediate_size": 96, "num_heads": 4}
    },
    "evaluation_config": {"shift": 7.0, "video_txt_guidance_scale": 5.0, "audio_txt_guidance_scale": 7.0,
                          "num_inference_steps": 100,
                          "data_proxy_config": {"t_patch_size": 1, "time_channel_dim": 64}}
  })");
}

void expect_tiny(const Magi2Config& c) {
  const DitArch& a = c.arch;
  EXPECT_EQ(a.num_layers, 4);
  EXPECT_EQ(a.hidden_size, 256);
  EXPECT_EQ(a.head_dim, 64);
  EXPECT_EQ(a.num_heads_q(), 4);
  EXPECT_EQ(a.num_heads_kv(), 4);
  EXPECT_EQ(a.mm_layers, (std::vector<int>{0, 3}));
  EXPECT_EQ(a.moe_layers, (std::vector<int>{1, 2}));
  EXPECT_TRUE(a.is_mm_layer(3));
  EXPECT_FALSE(a.is_mm_layer(1));
  EXPECT_TRUE(a.is_moe_layer(2));
  EXPECT_FALSE(a.is_moe_layer(0));
  EXPECT_EQ(a.moe_num_experts, 16);
  EXPECT_EQ(a.moe_top_k, 4);
  EXPECT_EQ(a.moe_num_heads, 4);
  EXPECT_EQ(a.moe_head_dim(), 64);
  EXPECT_EQ(a.moe_expert_intermediate_size, 64);
  EXPECT_EQ(a.moe_shared_expert_intermediate_size, 64);
  EXPECT_EQ(a.moe_modality_specific_expert_intermediate_size, 96);
  EXPECT_DOUBLE_EQ(a.moe_route_scale, 4.9);
  EXPECT_EQ(a.dense_intermediate(), 128);  // int(256 * 1 * 2/3) = 170 -> 128
  EXPECT_EQ(a.virtual_width(), 1024);
  EXPECT_EQ(a.text_in_channels, 64);
  EXPECT_EQ(a.out_channels(), 64);
  EXPECT_DOUBLE_EQ(c.eval.shift, 7.0);
  EXPECT_DOUBLE_EQ(c.eval.video_txt_guidance_scale, 5.0);
  EXPECT_DOUBLE_EQ(c.eval.audio_txt_guidance_scale, 7.0);
  EXPECT_EQ(c.engine.seed, 0);
  EXPECT_EQ(c.engine.cp_size, 1);
}

// ---------------------------------------------------------------- valid configs

TEST(Config, GoldenTinyParses) {
  const std::string path = test::golden_dir() + "/dit_tiny/config.json";
  if (!fs::exists(path)) GTEST_SKIP() << "golden config not found at " << path;
  Magi2Config c = Magi2Config::from_file(path);
  EXPECT_EQ(c.source, path);
  expect_tiny(c);
  EXPECT_EQ(c.eval.num_inference_steps, 100);
  EXPECT_DOUBLE_EQ(c.eval.fps, 12.5);
  EXPECT_EQ(c.eval.data_proxy.time_channel_dim, 64);
  EXPECT_NE(c.summary().find("layers 4"), std::string::npos) << c.summary();
}

TEST(Config, InlineTinyParses) { expect_tiny(Magi2Config::from_json_text(tiny().dump(), kSrc)); }

TEST(Config, ReleaseDefaultsMatchSpec) {
  const Magi2Config c = Magi2Config::release();
  const DitArch& a = c.arch;
  EXPECT_NO_THROW(a.validate("release"));
  EXPECT_EQ(a.num_layers, 40);
  EXPECT_EQ(a.hidden_size, 3072);
  EXPECT_EQ(a.head_dim, 128);
  EXPECT_EQ(a.num_heads_q(), 24);  // HQ
  EXPECT_EQ(a.num_heads_kv(), 24);  // HKV: no GQA
  EXPECT_EQ(a.virtual_width(), 12288);
  EXPECT_EQ(a.dense_intermediate(), 8192);
  EXPECT_EQ(a.moe_num_heads, 12);
  EXPECT_EQ(a.moe_head_dim(), 256);
  EXPECT_EQ(a.moe_num_experts, 256);
  EXPECT_EQ(a.moe_top_k, 6);
  EXPECT_EQ(a.moe_expert_intermediate_size, 1280);
  EXPECT_EQ(a.moe_shared_expert_intermediate_size, 1280);
  EXPECT_EQ(a.moe_modality_specific_expert_intermediate_size, 1280);
  EXPECT_DOUBLE_EQ(a.moe_route_scale, 4.9);
  EXPECT_TRUE(a.moe_route_norm);
  EXPECT_EQ(a.moe_score_func, "sigmoid");
  EXPECT_EQ(a.mm_layers, (std::vector<int>{0, 1, 38, 39}));
  ASSERT_EQ(a.moe_layers.size(), 36u);
  for (int l = 0; l < 40; ++l) EXPECT_EQ(a.is_moe_layer(l), l >= 2 && l <= 37) << l;
  EXPECT_EQ(a.rope_bands(), 16);
  EXPECT_EQ(a.mhc_num_stream, 4);
  EXPECT_EQ(a.video_in_channels, 48);
  EXPECT_EQ(a.audio_in_channels, 64);
  EXPECT_EQ(a.text_in_channels, 5120);
  EXPECT_EQ(a.out_channels(), 64);
  EXPECT_EQ(a.max_in_channels(), 5120);
  EXPECT_DOUBLE_EQ(c.eval.shift, 7.0);
  EXPECT_EQ(c.eval.num_inference_steps, 100);
}

TEST(Config, MissingKeysKeepReleaseDefaults) {
  const Magi2Config c = Magi2Config::from_json_text(R"({"arch_config": {}})", kSrc);
  EXPECT_EQ(c.source, kSrc);
  EXPECT_EQ(c.arch.num_layers, 40);
  EXPECT_EQ(c.arch.dense_intermediate(), 8192);
  EXPECT_EQ(c.arch.moe_layers.size(), 36u);
  EXPECT_DOUBLE_EQ(c.eval.video_txt_guidance_scale, 5.0);
  // Integers are fine where a real number is expected (Python writes 7 or 7.0 alike).
  json j = tiny();
  j["evaluation_config"]["shift"] = 5;
  EXPECT_DOUBLE_EQ(Magi2Config::from_json_text(j.dump(), kSrc).eval.shift, 5.0);
}

// ---------------------------------------------------------------- errors

TEST(ConfigErrors, BadJson) {
  EXPECT_TRUE(throws_with([] { Magi2Config::from_json_text("{\"arch_config\": {", kSrc); },
                          {kSrc, "not valid JSON"}));
  EXPECT_TRUE(throws_with([] { Magi2Config::from_json_text("[1]", kSrc); }, {kSrc, "not a JSON object"}));
}

TEST(ConfigErrors, FromFileNamesThePath) {
  const std::string d = test::temp_dir("config");
  const std::string p = d + "/broken.json";
  std::ofstream(p) << "{\"arch_config\": {\"num_layers\": \"four\"}}";
  EXPECT_TRUE(throws_with([&] { Magi2Config::from_file(p); }, {p, "arch_config.num_layers"}));
  EXPECT_TRUE(throws_with([&] { Magi2Config::from_file(d + "/absent.json"); }, {d + "/absent.json"}));
}

TEST(ConfigErrors, MissingArchConfig) {
  json j = tiny();
  j.erase("arch_config");
  EXPECT_TRUE(rejects(j, {"arch_config"}));
  j["arch_config"] = json::array({1, 2});
  EXPECT_TRUE(rejects(j, {"arch_config", "not an object"}));
}

TEST(ConfigErrors, UnknownArchKey) {
  json j = tiny();
  j["arch_config"]["num_layer"] = 4;  // a typo must not silently keep the default
  EXPECT_TRUE(rejects(j, {"unknown key", "arch_config.num_layer"}));
  j = tiny();
  j["arch_config"]["moe_config"]["topk"] = 4;
  EXPECT_TRUE(rejects(j, {"unknown key", "arch_config.moe_config.topk"}));
  j = tiny();
  j["arch_config"]["mhc_config"]["streams"] = 4;
  EXPECT_TRUE(rejects(j, {"unknown key", "arch_config.mhc_config.streams"}));
  j = tiny();
  j["arch_config"]["attn_sinks"]["sink_tokens"] = 2;
  EXPECT_TRUE(rejects(j, {"unknown key", "arch_config.attn_sinks.sink_tokens"}));
  j = tiny();
  j["arch_config"]["attn_gating"]["enabled"] = false;
  EXPECT_TRUE(rejects(j, {"unknown key", "arch_config.attn_gating.enabled"}));
  // Official-only keys with no effect are accepted.
  j = tiny();
  j["arch_config"]["layer_activation_types"] = json::object();
  j["arch_config"]["moe_config"]["split_merge_intermediate_size"] = nullptr;
  EXPECT_NO_THROW(Magi2Config::from_json_text(j.dump(), kSrc));
}

TEST(ConfigErrors, WrongType) {
  struct Case {
    std::vector<std::string> path;  // JSON path of the value to replace
    json value;
    std::string key;                // what the message must name
  };
  const std::vector<Case> cases = {
      {{"arch_config", "num_layers"}, "4", "arch_config.num_layers"},
      {{"arch_config", "num_layers"}, 4.5, "arch_config.num_layers"},      // not silently truncated
      {{"arch_config", "num_layers"}, true, "arch_config.num_layers"},     // not silently 1
      {{"arch_config", "hidden_size"}, 3e9, "arch_config.hidden_size"},   // out of int range
      {{"arch_config", "hidden_size"}, 4294967552ull, "arch_config.hidden_size"},  // 2^32+256: no wrap
      {{"arch_config", "params_dtype"}, 16, "arch_config.params_dtype"},
      {{"arch_config", "intermediate_factor"}, "1", "arch_config.intermediate_factor"},
      {{"arch_config", "intermediate_factor"}, false, "arch_config.intermediate_factor"},
      {{"arch_config", "mm_layers"}, "0,3", "arch_config.mm_layers"},
      {{"arch_config", "mm_layers"}, json::array({0, 2.5}), "arch_config.mm_layers"},
      {{"arch_config", "attn_gating", "enable"}, 1, "arch_config.attn_gating.enable"},
      {{"arch_config", "attn_gating"}, false, "arch_config.attn_gating"},  // must be {"enable": ...}
      {{"arch_config", "attn_sinks", "sink_token_num"}, "1", "arch_config.attn_sinks.sink_token_num"},
      {{"arch_config", "mhc_config"}, 4, "arch_config.mhc_config"},
      {{"arch_config", "moe_config"}, json::array({1}), "arch_config.moe_config"},
      {{"arch_config", "moe_config", "top_k"}, "4", "arch_config.moe_config.top_k"},
      {{"arch_config", "moe_config", "route_norm"}, "yes", "arch_config.moe_config.route_norm"},
      {{"arch_config", "moe_config", "moe_layers"}, json::array({"1"}), "arch_config.moe_config.moe_layers"},
      {{"engine_config", "seed"}, "0", "engine_config.seed"},
      {{"engine_config"}, 1, "engine_config"},
      {{"evaluation_config", "shift"}, "7", "evaluation_config.shift"},
      {{"evaluation_config", "num_inference_steps"}, 10.5, "evaluation_config.num_inference_steps"},
      {{"evaluation_config"}, json::array(), "evaluation_config"},
      {{"evaluation_config", "data_proxy_config", "time_channel_dim"}, "64",
       "evaluation_config.data_proxy_config.time_channel_dim"},
      {{"evaluation_config", "data_proxy_config"}, "x", "evaluation_config.data_proxy_config"},
  };
  for (const auto& c : cases) {
    json j = tiny();
    json* slot = &j;
    for (const auto& k : c.path) slot = &(*slot)[k];
    *slot = c.value;
    EXPECT_TRUE(rejects(j, {c.key, "wrong type"})) << c.key << " = " << c.value.dump();
  }
}

TEST(ConfigErrors, Gqa) {
  json j = tiny();
  j["arch_config"]["num_query_groups"] = 2;
  EXPECT_TRUE(rejects(j, {"arch_config.num_query_groups", "GQA", "4"}));
}

TEST(ConfigErrors, NonSigmoidRouter) {
  json j = tiny();
  j["arch_config"]["moe_config"]["score_func"] = "softmax";
  EXPECT_TRUE(rejects(j, {"arch_config.moe_config.score_func", "sigmoid"}));
}

TEST(ConfigErrors, MoeLayerThatIsAlsoMmLayer) {
  json j = tiny();
  j["arch_config"]["moe_config"]["moe_layers"] = {1, 2, 3};
  EXPECT_TRUE(rejects(j, {"arch_config.moe_config.moe_layers", "layer 3", "mm_layers"}));
}

TEST(ConfigErrors, StepsBelowOne) {
  for (int steps : {0, -5}) {
    json j = tiny();
    j["evaluation_config"]["num_inference_steps"] = steps;
    EXPECT_TRUE(rejects(j, {"evaluation_config.num_inference_steps", ">= 1"}));
  }
}

TEST(ConfigErrors, OtherInconsistentValues) {
  struct Case {
    std::vector<std::string> path;
    json value;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {{"arch_config", "num_layers"}, 0, {"arch_config.num_layers"}},
      {{"arch_config", "hidden_size"}, 250, {"arch_config.hidden_size", "head_dim"}},
      {{"arch_config", "mm_layers"}, json::array({0, 4}), {"arch_config.mm_layers", "layer 4", "out of range"}},
      {{"arch_config", "moe_config", "moe_layers"}, json::array({1, -1}),
       {"arch_config.moe_config.moe_layers", "layer -1"}},
      {{"arch_config", "moe_config", "top_k"}, 17, {"arch_config.moe_config.top_k"}},
      {{"arch_config", "moe_config", "num_heads"}, 3, {"arch_config.moe_config.num_heads"}},
      {{"arch_config", "mhc_config", "num_stream"}, 2, {"arch_config.mhc_config"}},
      {{"arch_config", "mhc_config", "enable"}, false, {"arch_config.mhc_config"}},
      {{"arch_config", "activation_type"}, "gelu", {"arch_config.activation_type"}},
      {{"arch_config", "params_dtype"}, "float32", {"arch_config.params_dtype"}},
      {{"arch_config", "attn_softcap"}, 30.0, {"arch_config.attn_softcap"}},
      {{"arch_config", "attn_gating", "enable"}, false, {"arch_config.attn_gating.enable"}},
      {{"arch_config", "attn_sinks", "sink_token_num"}, 2, {"arch_config.attn_sinks"}},
      {{"arch_config", "intermediate_factor"}, 0.1, {"arch_config.intermediate_factor"}},
      {{"evaluation_config", "data_proxy_config", "time_channel_dim"}, 32,
       {"evaluation_config.data_proxy_config.time_channel_dim"}},
  };
  for (const auto& c : cases) {
    json j = tiny();
    json* slot = &j;
    for (const auto& k : c.path) slot = &(*slot)[k];
    *slot = c.value;
    auto r = throws_with([&] { Magi2Config::from_json_text(j.dump(), kSrc); }, {kSrc});
    EXPECT_TRUE(r) << c.value.dump();
    for (const auto& w : c.words)
      EXPECT_TRUE(throws_with([&] { Magi2Config::from_json_text(j.dump(), kSrc); }, {w})) << c.value.dump();
  }
}

}  // namespace
}  // namespace magi2
