// The text encoder folder formats: the tiny text encoder that make-tiny writes
// (generated tokenizer, random weights) loads and encodes any UTF-8 text; the
// same weights in the VLM layout (composite qwen3_5 config with text_config,
// keys under model.language_model., an lm_head) give identical features;
// mismatched checkpoints and configs fail with one line naming the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "models/qwen35/text_encoder.h"
#include "engine/tiny_text_encoder.h"
#include "util/testing.h"

namespace magi2::qwen35 {
namespace {

namespace fs = std::filesystem;

std::string tiny_dir() {
  static const std::string dir = [] {
    const std::string d = test::temp_dir("tiny_text_encoder") + "/text_encoder";
    fs::create_directories(d);
    write_tiny_text_encoder(d, 0);
    return d;
  }();
  return dir;
}

// Copies the tiny text encoder with every tensor renamed by `rename` (and
// stored as `dtype`), plus `extra` tensors, and config.json replaced by `config`.
std::string relayout(const std::string& tag, const std::function<std::string(const std::string&)>& rename,
                     const std::vector<std::pair<std::string, Tensor>>& extra, const std::string& config,
                     DType dtype = DType::BF16) {
  const std::string d = test::temp_dir(tag);
  auto src = SafetensorsFile::open(tiny_dir() + "/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> ts = extra;
  for (const auto& e : src->entries()) ts.emplace_back(rename(e.name), src->tensor(e.name).to(dtype));
  write_safetensors(d + "/model.safetensors", ts);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(tiny_dir() + "/" + f, d + "/" + f);
  write_file_atomic(d + "/config.json", config);
  return d;
}

TEST(TinyTextEncoder, EncodesAnyUtf8Deterministically) {
  auto be = make_cpu_backend(1);
  auto enc = TextEncoder::load(tiny_dir(), *be);
  EXPECT_EQ(enc->config().hidden_size, 64);
  EXPECT_EQ(enc->config().num_hidden_layers, 8);
  const auto cfg = nlohmann::json::parse(read_text_file(tiny_dir() + "/config.json"));
  EXPECT_EQ(enc->tokenizer().token_to_id("<|im_end|>"), cfg.at("eos_token_id").get<int64_t>());
  EXPECT_EQ(enc->tokenizer().token_to_id("<|endoftext|>"), cfg.at("pad_token_id").get<int64_t>());
  EXPECT_LE(enc->tokenizer().id_bound(), enc->config().vocab_size);
  // The merges learned from the default negative prompt make it a few hundred tokens.
  const auto neg = enc->tokenizer().encode(std::string(default_negative_prompt()));
  EXPECT_LT(neg.size(), 600u);  // 477 (1721 bytes)
  EXPECT_EQ(enc->tokenizer().decode(neg.ids), std::string(default_negative_prompt()));
  const TextFeatures f = enc->encode("The cat, 猫 and 🐈 — naïve café.\n", false);
  EXPECT_EQ(f.prompt.encoding.num_dropped_bytes, 0);
  EXPECT_EQ(enc->tokenizer().decode(f.prompt.encoding.ids), "The cat, 猫 and 🐈 — naïve café.\n");
  EXPECT_EQ(f.features.shape(), (Shape{static_cast<int64_t>(f.prompt.encoding.size()), 64}));
  const test::Diff self = test::compare(f.features, f.features);
  EXPECT_GT(self.ref_rms, 0.3);
  EXPECT_LT(self.ref_rms, 5.0);  // O(1) activations from the init scales
  auto be2 = make_cpu_backend(2);
  auto enc2 = TextEncoder::load(tiny_dir(), *be2);
  const Tensor g = enc2->encode("The cat, 猫 and 🐈 — naïve café.\n", false).features;
  EXPECT_EQ(0, std::memcmp(f.features.data(), g.data(), g.nbytes()));
}

TEST(TinyTextEncoder, VlmLayoutAndF32StorageGiveIdenticalFeatures) {
  nlohmann::json text = nlohmann::json::parse(read_text_file(tiny_dir() + "/config.json"));
  nlohmann::json composite = {
      {"model_type", "qwen3_5"}, {"architectures", {"Qwen3_5ForConditionalGeneration"}}, {"text_config", text}};
  const std::string vlm = relayout(
      "text_vlm", [](const std::string& n) { return "model.language_model." + n; },
      {{"lm_head.weight", Tensor::zeros({text.at("vocab_size").get<int64_t>(), 64}, DType::BF16)}}, composite.dump(2));
  auto be = make_cpu_backend(1);
  auto plain = TextEncoder::load(tiny_dir(), *be);
  auto other = TextEncoder::load(vlm, *be);
  EXPECT_EQ(other->weights().prefix, "model.language_model.");
  EXPECT_EQ(other->weights().num_ignored, 1u);
  const Tensor a = plain->encode("a fox in the snow", false).features;
  const Tensor b = other->encode("a fox in the snow", false).features;
  ASSERT_EQ(a.nbytes(), b.nbytes());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.nbytes()));
  // The same values stored as f32: rounded back to bf16 at load, same features.
  const std::string f32 = relayout(
      "text_f32", [](const std::string& n) { return n; }, {}, read_text_file(tiny_dir() + "/config.json"), DType::F32);
  const Tensor c = TextEncoder::load(f32, *be)->encode("a fox in the snow", false).features;
  ASSERT_EQ(a.nbytes(), c.nbytes());
  EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.nbytes()));
}

TEST(TinyTextEncoder, MismatchesAreOneLineErrors) {
  auto be = make_cpu_backend(1);
  const std::string cfg = read_text_file(tiny_dir() + "/config.json");
  // An unknown tensor and a missing one are reported together.
  const std::string d1 = relayout(
      "text_bad_names", [](const std::string& n) { return n == "norm.weight" ? std::string("final_norm.weight") : n; },
      {}, cfg);
  EXPECT_TRUE(test::throws_with([&] { TextEncoder::load(d1, *be); },
                                {"1 missing [norm.weight]", "1 unexpected [final_norm.weight]"}));
  // A config whose hidden size does not fit the weights.
  nlohmann::json j = nlohmann::json::parse(cfg);
  j["hidden_size"] = 128;
  const std::string d2 = relayout(
      "text_bad_cfg", [](const std::string& n) { return n; }, {}, j.dump());
  EXPECT_TRUE(test::throws_with([&] { TextEncoder::load(d2, *be); }, {"wrong shape", "embed_tokens.weight"}));
  j = nlohmann::json::parse(cfg);
  j["hidden_act"] = "gelu";
  const std::string d3 = relayout(
      "text_bad_act", [](const std::string& n) { return n; }, {}, j.dump());
  EXPECT_TRUE(test::throws_with([&] { TextEncoder::load(d3, *be); }, {"hidden_act", "silu"}));
  EXPECT_TRUE(test::throws_with([&] { TextEncoder::load("/nonexistent/te", *be); }, {"/nonexistent/te"}));
}

}  // namespace
}  // namespace magi2::qwen35
