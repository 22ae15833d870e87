// `--offload layerwise` of the DiT on the CPU (models/magi2_dit/offload.h): the option,
// the slot layout against the memory plan's formula, the copy schedule (one
// copy per layer, fences in the designed order) and the streamed forward's
// bytes against the resident forward, through a synchronous memcpy queue (the
// CUDA queue is tests/cuda/test_cuda_offload.cpp); and the memory plan of a
// layerwise run on CUDA: 2 slots + the non-layer tensors on the device, every
// layer pinned on the host, and the "would fit" advice only where it does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "engine/model_files.h"
#include "engine/tiny_model.h"
#include "golden/dit_fixture.h"
#include "io/mmap_file.h"
#include "models/magi2_dit/offload.h"
#include "tiny_request.h"
#include "util/memcpy_queue.h"
#include "util/testing.h"

namespace magi2 {
namespace {

using test::MemcpyQueue;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(Offload, OptionNames) {
  EXPECT_EQ(offload_from_name("none", "--offload"), Offload::None);
  EXPECT_EQ(offload_from_name("layerwise", "--offload"), Offload::Layerwise);
  EXPECT_STREQ(offload_name(Offload::Layerwise), "layerwise");
  EXPECT_TRUE(test::throws_with([] { (void)offload_from_name("sideways", "--offload"); },
                                {"--offload", "none or layerwise", "sideways"}));
  EngineOptions o;
  o.offload = "Layerwise";
  EXPECT_TRUE(test::throws_with([&] { validate(o); }, {"--offload", "Layerwise"}));
}

TEST(Offload, LayoutScheduleAndBytesOfTheGoldenDit) {
  test::GoldenDit& g = test::GoldenDit::get();
  const DitArch& a = g.config.arch;
  auto cpu = make_cpu_backend(2);
  auto q = std::make_unique<MemcpyQueue>();
  MemcpyQueue* log = q.get();
  DitOffload off(g.weights, *cpu, std::move(q));
  // The runtime layout is the plan's formula.
  const OffloadBytes plan = offload_bytes(dit_tensor_specs(a));
  EXPECT_EQ(off.slot_bytes(), plan.slot);
  EXPECT_EQ(off.pinned_bytes(), plan.layers);
  EXPECT_LE(off.bytes_per_forward(), plan.layers);
  uint64_t raw = 0;
  for (DitLayerWeights L : g.weights.layers)
    for_each_layer_tensor(L, [&](const char*, Tensor& t) { raw += t.defined() ? t.nbytes() : 0; });
  EXPECT_GE(off.bytes_per_forward(), raw);
  // Non-layer tensors resident, layer tensors inside the two slots.
  EXPECT_EQ(off.weights().final_linear_video.data(), g.weights.final_linear_video.data());  // CPU: shared
  EXPECT_NE(off.weights().layers[0].linear_qkv.data(), g.weights.layers[0].linear_qkv.data());
  // Layer l lies in slot l % 2: l and l + 2 share one slot-sized window, 0 and 1 do not overlap.
  std::vector<std::pair<uintptr_t, uintptr_t>> span;
  for (DitLayerWeights L : off.weights().layers) {
    std::pair<uintptr_t, uintptr_t> s{UINTPTR_MAX, 0};
    for_each_layer_tensor(L, [&](const char*, Tensor& t) {
      if (!t.defined()) return;
      const auto p = reinterpret_cast<uintptr_t>(t.data());
      s = {std::min(s.first, p), std::max(s.second, p + t.nbytes())};
    });
    span.push_back(s);
  }
  for (size_t l = 0; l + 2 < span.size(); ++l)
    EXPECT_LE(std::max(span[l].second, span[l + 2].second) - std::min(span[l].first, span[l + 2].first),
              off.slot_bytes())
        << l;
  EXPECT_TRUE(span[0].second <= span[1].first || span[1].second <= span[0].first);

  // The streamed forward gives the resident forward's bytes, twice in a row.
  Dit resident(a, g.weights, *cpu), streamed(a, off, *cpu);
  for (const std::string p : {"t2v_", "i2v_"}) {
    DitRunOptions opt;
    opt.forced_topk = g.forced_topk(p);
    const Tensor ref = resident.forward(g.inputs(p), opt).clone();
    log->log.clear();
    EXPECT_TRUE(same_bytes(streamed.forward(g.inputs(p), opt).clone(), ref)) << p;
    EXPECT_TRUE(same_bytes(streamed.forward(g.inputs(p)).clone(), resident.forward(g.inputs(p)).clone())) << p;
  }
  // Schedule of one forward: layers 0 and 1 up front, then layer l + 2 into slot l % 2
  // once layer l is done; compute waits for its slot before each layer; one copy per layer.
  std::vector<std::string> want = {"w", "c", "s0", "c", "s1"};
  for (int l = 0; l < a.num_layers; ++l) {
    want.push_back(str_cat("cw", l % 2));
    if (l + 2 < a.num_layers) want.insert(want.end(), {"w", "c", str_cat("s", l % 2)});
  }
  const std::vector<std::string> last(log->log.end() - static_cast<std::ptrdiff_t>(want.size()), log->log.end());
  EXPECT_EQ(last, want);
  EXPECT_EQ(log->bytes % off.bytes_per_forward(), 0u);
}

TEST(Offload, SharedStorageIsPinnedOnceAndStillStreamed) {
  // bench's weights: one expert bank for every MoE layer.
  test::GoldenDit& g = test::GoldenDit::get();
  const DitArch& a = g.config.arch;
  std::map<std::string, Tensor> banks;
  const DitWeights w = DitWeights::generate(a, [&](const DitTensorSpec& s) {
    for (const char* b : {"W_gate", "W_up", "W_down"})
      if (s.name.ends_with(b)) {
        auto it = banks.find(b);
        if (it == banks.end()) it = banks.emplace(b, random_dit_tensor(s, 5)).first;
        return it->second;
      }
    return random_dit_tensor(s, 9);
  });
  auto cpu = make_cpu_backend(2);
  DitOffload off(w, *cpu, std::make_unique<MemcpyQueue>());
  const OffloadBytes plan = offload_bytes(dit_tensor_specs(a));
  const uint64_t bank_bytes = (banks.at("W_gate").nbytes() + banks.at("W_up").nbytes() + banks.at("W_down").nbytes());
  EXPECT_EQ(off.pinned_bytes() + (a.moe_layers.size() - 1) * bank_bytes, plan.layers);
  EXPECT_EQ(off.slot_bytes(), plan.slot);
  Dit resident(a, w, *cpu), streamed(a, off, *cpu);
  EXPECT_TRUE(same_bytes(streamed.forward(g.inputs("t2v_")).clone(), resident.forward(g.inputs("t2v_")).clone()));
}

TEST(Offload, CpuBackendHasNoQueue) {
  auto cpu = make_cpu_backend(1);
  test::GoldenDit& g = test::GoldenDit::get();
  EXPECT_TRUE(test::throws_with([&] { DitOffload off(g.weights, *cpu, nullptr); }, {"--offload layerwise", "cpu"}));
}

EngineOptions tiny_options(const std::string& offload) {
  static const std::string cache = test::temp_dir("offload_cache");
  // The text encoder on the CPU: the DiT alone in the device pool, no sequential residency in the budget checks.
  return test::tiny_engine_options(cache, "cpu", offload);
}

GenerateParams small_request() {
  static const std::string dir = test::temp_dir("offload_requests");
  return test::small_request(dir, "r");
}

TEST(Offload, MemoryPlanOfALayerwiseRun) {
  MemoryPlanner full(tiny_options("none"), "cuda"), lw(tiny_options("layerwise"), "cuda");
  const Magi2Config cfg = config_for_model(resolve_model(kBuiltinTiny, tiny_options("none").cache), "");
  const OffloadBytes b = offload_bytes(dit_tensor_specs(cfg.arch));
  ASSERT_LT(b.device(), full.dit_weights());  // 4 layers: two slots hold less than all of them
  EXPECT_EQ(lw.dit_weights(), b.device());
  EXPECT_EQ(full.dit_weights(), b.resident + [&] {
    uint64_t raw = 0;
    for (const DitTensorSpec& s : dit_tensor_specs(cfg.arch))
      if (s.name.starts_with("block.layers.")) raw += Tensor::empty(s.shape, s.dtype).nbytes();
    return raw;
  }());
  EXPECT_EQ(full.dit_weights_layerwise(), b.device());

  const MemoryPlan pf = full.plan(small_request(), 0, "none"), pl = lw.plan(small_request(), 0, "none");
  const StageMemory *df = pf.stage("dit"), *dl = pl.stage("dit");
  ASSERT_TRUE(df && dl);
  EXPECT_EQ(dl->weights, b.device());
  EXPECT_EQ(dl->pinned_host, b.layers);
  EXPECT_EQ(df->pinned_host, 0u);
  EXPECT_EQ(dl->activations, df->activations);
  EXPECT_EQ(dl->workspace, df->workspace);
  EXPECT_EQ(pf.peak_device - pl.peak_device, df->weights - dl->weights);
  ASSERT_EQ(pf.phases.size(), pl.phases.size());
  for (size_t i = 0; i < pf.phases.size(); ++i) EXPECT_EQ(pl.phases[i].host, pf.phases[i].host + b.layers);
  EXPECT_NE(pl.text().find("pinned host memory"), std::string::npos);
  EXPECT_EQ(pl.json()["stages"].back()["pinned_host_bytes"], b.layers);

  // A budget that only the layerwise plan fits: the advice names --offload layerwise, and it is true.
  const uint64_t budget = pl.peak_device;
  const MemoryPlan over = full.plan(small_request(), budget, "--max-device-memory");
  EXPECT_FALSE(over.fits);
  EXPECT_NE(over.advice.find("--offload layerwise"), std::string::npos) << over.advice;
  EXPECT_TRUE(lw.plan(small_request(), budget, "--max-device-memory").fits);
  // One byte less: layerwise does not fit either, so it is not offered.
  const MemoryPlan under = full.plan(small_request(), budget - 1, "--max-device-memory");
  EXPECT_EQ(under.advice.find("--offload layerwise"), std::string::npos) << under.advice;
  EXPECT_FALSE(lw.plan(small_request(), budget - 1, "--max-device-memory").fits);
  // The CPU backend streams nothing: its plan is the resident one.
  MemoryPlanner cpu_lw(tiny_options("layerwise"), "cpu"), cpu(tiny_options("none"), "cpu");
  EXPECT_EQ(cpu_lw.dit_weights(), cpu.dit_weights());
  EXPECT_EQ(cpu_lw.plan(small_request(), 0, "none").stage("dit")->pinned_host, 0u);
}

TEST(Offload, CpuEngineAcceptsLayerwiseAndStreamsNothing) {
  const std::string dir = test::temp_dir("offload_cpu_engine");
  EngineOptions o = tiny_options("layerwise");
  o.device = "cpu";
  Engine engine(o);
  const GenerateParams p = test::small_request(dir, "cpu");
  engine.generate(p);
  const nlohmann::json m = nlohmann::json::parse(read_text_file(p.metrics_path));
  EXPECT_EQ(m["offload"]["mode"], "layerwise");
  EXPECT_EQ(m["offload"]["streaming"], false);
  EXPECT_EQ(m["offload"]["pcie_bytes_per_step"], 0);
}

}  // namespace
}  // namespace magi2
