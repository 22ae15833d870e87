// `--offload layerwise` for the Qwen3.5 text encoder on the CPU
// (TextEncoder::load with a copy queue, ops/layer_offload.h), through a
// synchronous memcpy queue (the CUDA queue: tests/cuda/test_cuda_text_encoder.cpp):
// the streamed features are the resident run's bytes, the copy schedule, and
// the memory plan's text encoder stage of a layerwise run on CUDA (embeddings
// + 2 slots on the device, the layers pinned on the host) against the layout
// LayerOffload makes.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/memory_plan.h"
#include "engine/model_files.h"
#include "engine/text_conditioning.h"
#include "engine/tiny_model.h"
#include "models/qwen35/text_encoder.h"
#include "tiny_request.h"
#include "util/memcpy_queue.h"
#include "util/testing.h"

namespace magi2::qwen35 {
namespace {

using test::MemcpyQueue;

std::string golden_text_dir() { return test::golden_dir() + "/qwen35_text_tiny"; }

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(TextOffload, StreamedFeaturesAreTheResidentBytes) {
  auto be = make_cpu_backend(2);
  const std::string dir = golden_text_dir() + "/text_encoder";
  auto resident = TextEncoder::load(dir, *be, DType::BF16);
  auto q = std::make_unique<MemcpyQueue>();
  MemcpyQueue* log = q.get();
  auto streamed = TextEncoder::load(dir, *be, DType::BF16, kOfficialSkipLayer, std::move(q));
  ASSERT_EQ(resident->offload(), nullptr);
  ASSERT_NE(streamed->offload(), nullptr);
  const int layers = resident->weights().num_bound_layers;
  EXPECT_EQ(streamed->offload()->num_layers(), static_cast<size_t>(layers));
  // The embeddings stay as bound; the layers compute from the slots.
  EXPECT_TRUE(same_bytes(streamed->weights().embed_tokens, resident->weights().embed_tokens));
  EXPECT_NE(streamed->weights().layers[0].input_layernorm.data(), resident->weights().layers[0].input_layernorm.data());

  nlohmann::json prompts;
  std::ifstream(golden_text_dir() + "/prompts.json") >> prompts;
  ASSERT_GE(prompts.size(), 2u);
  for (size_t i : {size_t{0}, prompts.size() - 1}) {
    const std::string raw = prompts[i].at("raw_prompt");
    log->log.clear();
    log->bytes = 0;
    EXPECT_TRUE(same_bytes(streamed->encode(raw, false).features, resident->encode(raw, false).features)) << i;
    // Schedule of one forward: layers 0 and 1 up front, then layer l + 2 into slot l % 2
    // once layer l is done; compute waits for its slot before each layer; one copy per layer.
    std::vector<std::string> want = {"w", "c", "s0"};
    if (layers > 1) want.insert(want.end(), {"c", "s1"});
    for (int l = 0; l < layers; ++l) {
      want.push_back(str_cat("cw", l % 2));
      if (l + 2 < layers) want.insert(want.end(), {"w", "c", str_cat("s", l % 2)});
    }
    EXPECT_EQ(log->log, want) << i;
    EXPECT_EQ(log->bytes, streamed->offload()->bytes_per_forward()) << i;
  }
}

TEST(TextOffload, CpuBackendWithoutQueueIsResident) {
  auto be = make_cpu_backend(1);
  auto enc = TextEncoder::load(golden_text_dir() + "/text_encoder", *be, DType::BF16, kOfficialSkipLayer, nullptr);
  EXPECT_EQ(enc->offload(), nullptr);
}

EngineOptions tiny_options(const std::string& offload) {
  static const std::string cache = test::temp_dir("text_offload_cache");
  return test::tiny_engine_options(cache, "auto", offload);  // the text encoder on the DiT's backend: the GPU here
}

TEST(TextOffload, MemoryPlanOfALayerwiseTextEncoder) {
  const std::string dir = test::temp_dir("text_offload_requests");
  MemoryPlanner full(tiny_options("none"), "cuda"), lw(tiny_options("layerwise"), "cuda");
  const MemoryPlan pf = full.plan(test::small_request(dir, "r"), 0, "none");
  const MemoryPlan pl = lw.plan(test::small_request(dir, "r"), 0, "none");
  const StageMemory *tf = pf.stage("text_encoder"), *tl = pl.stage("text_encoder");
  ASSERT_TRUE(tf && tl);
  EXPECT_EQ(tf->pinned_host, 0u);
  EXPECT_EQ(tl->activations, tf->activations);
  EXPECT_NE(tl->source.find("pinned host memory"), std::string::npos) << tl->source;

  // The plan's figures are the layout LayerOffload gives the same model's weights.
  auto be = make_cpu_backend(1);
  const std::string te_dir = find_text_encoder_dir(resolve_model(kBuiltinTiny, tiny_options("none").cache), "");
  auto resident = TextEncoder::load(te_dir, *be, DType::BF16);
  auto streamed = TextEncoder::load(te_dir, *be, DType::BF16, kOfficialSkipLayer, std::make_unique<MemcpyQueue>());
  const LayerOffload& off = *streamed->offload();
  const TextWeights& w = resident->weights();
  uint64_t layers = 0;
  for (const OffloadLayer& l : w.bound_layer_tensors(resident->config()))
    for (const auto& [name, t] : l) layers += t.nbytes();
  EXPECT_EQ(tf->weights, w.embed_tokens.nbytes() + w.norm.nbytes() + layers);
  EXPECT_EQ(tl->weights, w.embed_tokens.nbytes() + w.norm.nbytes() + 2 * off.slot_bytes());
  EXPECT_EQ(tl->pinned_host, off.pinned_bytes());
  // The encode phase holds the pinned layers on the host.
  const MemoryPlan::Phase *ef = pf.phase("encode"), *el = pl.phase("encode");
  ASSERT_TRUE(ef && el);
  EXPECT_GE(el->host, off.pinned_bytes());

  // The CPU backend streams nothing: its plan is the resident one.
  MemoryPlanner cpu_lw(tiny_options("layerwise"), "cpu");
  const MemoryPlan pc = cpu_lw.plan(test::small_request(dir, "c"), 0, "none");
  const StageMemory* tc = pc.stage("text_encoder");
  ASSERT_TRUE(tc);
  EXPECT_EQ(tc->pinned_host, 0u);
  EXPECT_EQ(tc->weights, tf->weights);
}

}  // namespace
}  // namespace magi2::qwen35
