// The memory plan (engine/memory_plan.h) on the built-in tiny model, CPU
// backend: planned DiT activations equal what the loop allocates, residency
// (the text encoder freed before the DiT loads when both do not fit; the DiT
// loaded once across samples), the budget check before loading, byte sizes.
#include <gtest/gtest.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "io/mmap_file.h"
#include "tiny_request.h"
#include "util/testing.h"

namespace magi2 {
namespace {

EngineOptions tiny_options() {
  static const std::string cache = test::temp_dir("memplan_cache");
  EngineOptions o;
  o.model = kBuiltinTiny;
  o.cache.cache_dir = cache;
  o.device = "cpu";
  o.threads = 2;
  return o;
}

using test::small_request;  // the sizes are request parameters

TEST(MemoryPlan, ParsesByteSizes) {
  EXPECT_EQ(parse_byte_size("4096", "--max-device-memory"), 4096u);
  EXPECT_EQ(parse_byte_size("40GiB", "--max-device-memory"), uint64_t{40} << 30);
  EXPECT_EQ(parse_byte_size("1.5 MiB", "--max-device-memory"), uint64_t{3} << 19);
  EXPECT_EQ(parse_byte_size("80GB", "--max-device-memory"), uint64_t{80000000000});
  for (const char* bad : {"", "abc", "-1GiB", "12XB", "1e30GiB"})
    EXPECT_TRUE(test::throws_with([&] { parse_byte_size(bad, "--max-device-memory"); }, {"--max-device-memory"}))
        << bad;
}

TEST(MemoryPlan, PlannedDitActivationsAreWhatTheLoopAllocates) {
  const std::string dir = test::temp_dir("memplan_exact");
  Engine engine(tiny_options());
  const GenerateParams p = small_request(dir, "a");
  const PreparedRequest r = engine.prepare(p);
  engine.run(r);
  const auto m = nlohmann::json::parse(read_text_file(p.metrics_path));
  const StageMemory* dit = r.memory_plan.stage("dit");
  ASSERT_NE(dit, nullptr);
  EXPECT_EQ(dit->activations, m["workspace_bytes"].get<uint64_t>());
  EXPECT_EQ(m["memory_plan"]["tokens"].get<int64_t>(), m["tokens_per_forward"].get<int64_t>());
  EXPECT_EQ(m["memory_plan"]["prompt_tokens"].get<int64_t>(), m["prompt_tokens"].get<int64_t>());
  EXPECT_TRUE(r.memory_plan.fits);
  EXPECT_EQ(r.memory_plan.residency, Residency::Together);
  EXPECT_NE(r.memory_plan.text().find("dit"), std::string::npos);
}

TEST(MemoryPlan, TextEncoderAndDitAreNotResidentTogetherWhenTheyDoNotFit) {
  const std::string dir = test::temp_dir("memplan_seq");
  EngineOptions o = tiny_options();
  // The budget between the sequential peak (the DiT's phase alone) and the
  // peak with the text encoder kept beside it.
  MemoryPlanner planner(o, "cpu");
  const GenerateParams a = small_request(dir, "a"), b = small_request(dir, "b");
  const MemoryPlan free_plan = planner.plan(a, 0, "none");
  const StageMemory* te = free_plan.stage("text_encoder");
  const StageMemory* dit = free_plan.stage("dit");
  ASSERT_TRUE(te && dit);
  ASSERT_GT(te->weights, 0u);
  o.max_device_memory = dit->total() + te->weights / 2;
  const MemoryPlan seq = planner.plan(a, o.max_device_memory, "test");
  EXPECT_TRUE(seq.fits) << seq.text();
  EXPECT_EQ(seq.residency, Residency::Sequential) << seq.text();

  // Two samples as the CLI runs them under sequential residency: every prompt
  // encoded first, the text encoder released, then both loops.
  Engine engine(o);
  std::vector<PreparedRequest> ready;
  ready.push_back(engine.prepare(a));
  ready.push_back(engine.prepare(b));
  EXPECT_EQ(engine.residency(), Residency::Sequential);
  engine.release_text_encoder();
  engine.run(ready[0]);
  engine.run(ready[1]);
  const auto& log = engine.residency_log();
  // Replay the log: the text encoder and the DiT are never loaded at once,
  // the text encoder is loaded once, the DiT is loaded once after it.
  bool te_on = false, dit_on = false;
  int te_loads = 0, dit_loads_after_te = 0;
  std::string trace;
  for (const ResidencyEvent& e : log) {
    trace += (e.loaded ? "+" : "-") + e.stage + " ";
    if (e.stage == "text_encoder") te_on = e.loaded, te_loads += e.loaded;
    if (e.stage == "dit") {
      dit_on = e.loaded;
      if (e.loaded && te_loads > 0) ++dit_loads_after_te;
    }
    EXPECT_FALSE(te_on && dit_on) << trace;
  }
  EXPECT_EQ(te_loads, 1) << trace;
  EXPECT_EQ(dit_loads_after_te, 1) << trace;
  EXPECT_TRUE(dit_on) << trace;
}

// --text-encoder-device auto on CUDA (planned here without a GPU): the text
// encoder lives on the device beside the DiT, and residency turns sequential
// when both do not fit the GPU budget; with "cpu" it stays on the host.
TEST(MemoryPlan, TextEncoderOnTheGpuSharesItsBudget) {
  const std::string dir = test::temp_dir("memplan_te_gpu");
  EngineOptions o = tiny_options();
  o.device = "cuda";
  o.text_encoder_device = "cpu";
  const GenerateParams a = small_request(dir, "a");
  const MemoryPlan host = MemoryPlanner(o, "cuda").plan(a, 0, "none");
  ASSERT_NE(host.stage("text_encoder"), nullptr);
  EXPECT_EQ(host.stage("text_encoder")->pool, MemoryPool::Host);
  o.text_encoder_device = "auto";
  MemoryPlanner planner(o, "cuda");
  const MemoryPlan together = planner.plan(a, 0, "none");
  const StageMemory* te = together.stage("text_encoder");
  const StageMemory* dit = together.stage("dit");
  ASSERT_TRUE(te && dit);
  EXPECT_EQ(te->pool, MemoryPool::Device);
  EXPECT_EQ(te->backend, "cuda");
  EXPECT_EQ(together.residency, Residency::Together);
  const MemoryPlan seq = planner.plan(a, dit->total() + te->weights / 2, "test");
  EXPECT_TRUE(seq.fits) << seq.text();
  EXPECT_EQ(seq.residency, Residency::Sequential) << seq.text();
}

// --decoder-device auto on CUDA (planned here without a GPU): the TurboVAE and
// Stable Audio Open decoders and the Wan2.2 encoder are device stages beside
// the DiT (no budget: nothing is parted), so the decode phase's device peak
// holds them; with "cpu" they are host stages.
TEST(MemoryPlan, DecodersOnTheGpuCountOnTheDevice) {
  const std::string dir = test::temp_dir("memplan_codec_gpu");
  EngineOptions o = tiny_options();
  o.device = "cuda";
  o.decoder_device = "cpu";
  GenerateParams a = small_request(dir, "a");
  a.outputs.wav_path = dir + "/a.wav";  // a decoding request
  const MemoryPlan host = MemoryPlanner(o, "cuda").plan(a, 0, "none");
  for (const char* st : {"turbovae_decode", "oobleck_decode"}) {
    ASSERT_NE(host.stage(st), nullptr) << st;
    EXPECT_EQ(host.stage(st)->pool, MemoryPool::Host) << st;
    EXPECT_EQ(host.stage(st)->backend, "cpu") << st;
  }
  o.decoder_device = "auto";
  const MemoryPlan dev = MemoryPlanner(o, "cuda").plan(a, 0, "none");
  uint64_t codecs = 0;
  for (const char* st : {"turbovae_decode", "oobleck_decode"}) {
    ASSERT_NE(dev.stage(st), nullptr) << st;
    EXPECT_EQ(dev.stage(st)->pool, MemoryPool::Device) << st;
    EXPECT_EQ(dev.stage(st)->backend, "cuda") << st;
    codecs += dev.stage(st)->total();
  }
  EXPECT_GE(dev.peak_device, dev.stage("dit")->total() + codecs) << dev.text();
  EXPECT_GT(dev.peak_device, host.peak_device) << dev.text();
}

TEST(MemoryPlan, DitStaysResidentAcrossSamplesWithinTheBudget) {
  const std::string dir = test::temp_dir("memplan_together");
  Engine engine(tiny_options());  // budget: the host's RAM
  const PreparedRequest a = engine.prepare(small_request(dir, "a"));
  engine.run(a);
  const PreparedRequest b = engine.prepare(small_request(dir, "b"));
  engine.run(b);
  int dit_events = 0;
  for (const ResidencyEvent& e : engine.residency_log()) dit_events += e.stage == "dit";
  EXPECT_EQ(dit_events, 1);  // loaded once by the constructor, never freed
  EXPECT_EQ(engine.residency(), Residency::Together);
}

TEST(MemoryPlan, RequestOverTheBudgetStopsBeforeLoading) {
  const std::string dir = test::temp_dir("memplan_over");
  EngineOptions o = tiny_options();
  MemoryPlanner planner(o, "cpu");
  const GenerateParams p = small_request(dir, "a");
  const MemoryPlan free_plan = planner.plan(p, 0, "none");
  const StageMemory* dit = free_plan.stage("dit");
  ASSERT_NE(dit, nullptr);
  // Weights fit, activations do not: the request is refused in prepare, naming what would fit.
  o.max_device_memory = dit->weights + dit->activations / 2;
  Engine engine(o);
  EXPECT_TRUE(test::throws_with([&] { engine.prepare(p); }, {"--prompt", "memory plan", "would fit", "--resolution"}));
  for (const ResidencyEvent& e : engine.residency_log()) EXPECT_NE(e.stage, "text_encoder");
  // Weights alone do not fit: the engine is refused before loading them. --offload layerwise
  // streams nothing on the CPU backend, so it is not offered (test_offload: where it is).
  o.max_device_memory = dit->weights / 2;
  EXPECT_TRUE(test::throws_with([&] { Engine too_small(o); }, {"DiT", "--weights fp8-experts"}));
  try {
    Engine too_small(o);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("--offload"), std::string::npos) << e.what();
  }
}

// On CUDA the routed experts' workspace shrinks with smaller passes (the same
// bytes): a budget one byte short of the denoise phase names --moe-max-rows,
// and the plan with that pass size fits it.
TEST(MemoryPlan, AdviceNamesSmallerMoePassesWhereTheyFit) {
  const std::string dir = test::temp_dir("memplan_moe_rows");
  EngineOptions o = tiny_options();
  o.device = "auto";
  GenerateParams p = small_request(dir, "a");
  p.width = 448, p.height = 256, p.seconds = 10;  // enough routed rows for passes of >= 65,536
  const MemoryPlan free_plan = MemoryPlanner(o, "cuda").plan(p, 0, "none");
  const MemoryPlan::Phase* dn = free_plan.phase("denoise");
  ASSERT_NE(dn, nullptr);
  const uint64_t budget = free_plan.stage("dit")->total() - 1;
  const MemoryPlan over = MemoryPlanner(o, "cuda").plan(p, budget, "--max-device-memory");
  ASSERT_FALSE(over.fits);
  const size_t at = over.advice.find("--moe-max-rows ");
  ASSERT_NE(at, std::string::npos) << over.advice;
  std::printf("%s\n", over.advice.c_str());
  o.cuda.moe_max_rows = std::stoll(over.advice.substr(at + 15));
  EXPECT_LT(o.cuda.moe_max_rows, CudaOptions::kDefaultMoeMaxRows);
  EXPECT_TRUE(MemoryPlanner(o, "cuda").plan(p, budget, "--max-device-memory").fits) << o.cuda.moe_max_rows;
  // The CPU backend has no such workspace: never named there.
  const MemoryPlan cpu = MemoryPlanner(tiny_options(), "cpu").plan(p, 1, "--max-device-memory");
  EXPECT_EQ(cpu.advice.find("--moe-max-rows"), std::string::npos) << cpu.advice;
}

}  // namespace
}  // namespace magi2
