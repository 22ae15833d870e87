// Stage residency of the memory plan (engine/memory_plan.h) for a 1080p
// request on the built-in tiny model: the refiner stage and the refine phase,
// the planned refiner activations against the buffers a real forward
// allocates, and the residency the planner picks for a CUDA DiT (planned here
// without a GPU) under three explicit budgets: everything together, the DiT
// freed before the refiner, nothing fits. Then the engine on the CPU under a
// host budget that parts the DiT and the refiner: the log shows the free and
// the reload, and the clip is the one of a run with everything resident.
// Sizes and names come from the model's files and the plan, not constants.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "engine/model_files.h"
#include "engine/tiny_model.h"
#include "io/checkpoint.h"
#include "io/mmap_file.h"
#include "media/sha256.h"
#include "models/magi2_refiner/refiner.h"
#include "models/magi2_refiner/tokens.h"
#include "models/magi2_refiner/weights.h"
#include "pipeline/generate.h"
#include "util/testing.h"

namespace magi2 {
namespace {

EngineOptions tiny_options() {
  static const std::string cache = test::temp_dir("residency_cache");
  EngineOptions o;
  o.model = kBuiltinTiny;
  o.cache.cache_dir = cache;
  o.device = "cpu";
  o.threads = 2;
  return o;
}

// The preview at 64x32, then the refiner to 128x64 (as tests/cli/test_refine_cli), decoded to a WAV.
GenerateParams request_1080p(const std::string& dir, const std::string& name) {
  GenerateParams p;
  p.prompt = "A red kite over a windy beach.";
  p.resolution = "1080p";
  p.seconds = 1;
  p.width = 64;
  p.height = 32;
  p.refiner_width = 128;
  p.refiner_height = 64;
  p.steps = 1;
  p.refiner_steps = 1;
  p.latents_path = dir + "/" + name + ".safetensors";
  p.metrics_path = dir + "/" + name + ".json";
  p.outputs.wav_path = dir + "/" + name + ".wav";
  return p;
}

std::vector<std::string> phase_names(const MemoryPlan& m) {
  std::vector<std::string> n;
  for (const MemoryPlan::Phase& p : m.phases) n.push_back(p.name);
  return n;
}

// The budget's pool at its peak without the given phases' stages parted:
// lowered one byte below each plan's peak until the planner parts the DiT and
// the refiner (or nothing fits any more).
uint64_t budget_parting_dit_and_refiner(MemoryPlanner& planner, const GenerateParams& p) {
  uint64_t budget = planner.plan(p, 0, "none").peak_in_budget_pool() - 1;
  for (;;) {
    const MemoryPlan m = planner.plan(p, budget, "test");
    if (!m.fits || m.refiner_swaps_dit) return budget;
    budget = m.peak_in_budget_pool() - 1;
  }
}

TEST(StageResidency, RefinerStageFromTheCheckpointAndItsPhase) {
  const std::string dir = test::temp_dir("residency_stage");
  EngineOptions o = tiny_options();
  o.device = "cuda";
  o.refiner_device = "auto";
  MemoryPlanner planner(o, "cuda");
  const GenerateParams p = request_1080p(dir, "a");
  const MemoryPlan m = planner.plan(p, 0, "none");
  const StageMemory* rf = m.stage("refiner");
  ASSERT_NE(rf, nullptr) << m.text();
  EXPECT_EQ(rf->backend, "cuda");  // --refiner-device auto: the DiT's backend
  EXPECT_EQ(rf->pool, MemoryPool::Device);
  // Weights: the refiner checkpoint's tensor list at the dtypes RefinerWeights binds.
  const std::string root = resolve_model(o.model, o.cache);
  const RefinerConfig rc = refiner_config_for_model(root, "");
  const Checkpoint ck = Checkpoint::open(find_refiner_dir(root));
  uint64_t want = 0;
  for (const auto& [name, spec] : RefinerWeights::specs(rc.arch)) {
    ASSERT_TRUE(ck.contains(name)) << name;
    EXPECT_EQ(ck.entry(name).shape, spec.first) << name;
    uint64_t n = 1;
    for (int64_t d : spec.first) n *= static_cast<uint64_t>(d);
    want += n * dtype_size(spec.second);
  }
  EXPECT_EQ(rf->weights, want);
  EXPECT_EQ(planner.refiner_weights(), want);
  EXPECT_GT(rf->activations, 0u);
  EXPECT_EQ(phase_names(m), (std::vector<std::string>{"encode", "denoise", "refine", "decode"}));
  EXPECT_NE(m.text().find("phase refine"), std::string::npos) << m.text();
  const nlohmann::json j = m.json();
  EXPECT_EQ(j.at("refiner_tokens").get<int64_t>(), m.refiner_tokens);
  bool listed = false;
  for (const auto& s : j.at("stages")) listed |= s.at("stage") == "refiner";
  EXPECT_TRUE(listed) << j.dump(1);
  // The decoders take the refined latent: more pixels than the preview's.
  GenerateParams preview = p;
  preview.resolution = "540p";
  const MemoryPlan pm = planner.plan(preview, 0, "none");
  EXPECT_EQ(pm.stage("refiner"), nullptr);
  EXPECT_GT(m.stage("turbovae_decode")->activations, pm.stage("turbovae_decode")->activations);
}

// The planned refiner activations are the buffers of one forward of the
// larger CFG branch (RefinerWorkspace) plus its two i32 permutation rows.
TEST(StageResidency, PlannedRefinerActivationsAreWhatAForwardAllocates) {
  const std::string dir = test::temp_dir("residency_exact");
  EngineOptions o = tiny_options();
  MemoryPlanner planner(o, "cpu");
  const GenerateParams p = request_1080p(dir, "a");
  const MemoryPlan m = planner.plan(p, 0, "none");
  const StageMemory* rf = m.stage("refiner");
  ASSERT_NE(rf, nullptr);
  const std::string root = resolve_model(o.model, o.cache);
  const RefinerConfig rc = refiner_config_for_model(root, "");
  const Checkpoint ck = Checkpoint::open(find_refiner_dir(root));
  const RefinerWeights w = RefinerWeights::bind(ck, rc.arch);
  // The refined grid: the preview's latent frames from the DiT's plan (2T - 1), the refiner size / stride.
  const Magi2Config dc = config_for_model(root, "");
  const LatentShape ls = latent_shape_for_clip(p.seconds, p.pixel_width(), p.pixel_height(), dc.eval.fps);
  RefinerLayout layout{.frames = 2 * ls.frames - 1, .height = p.refiner_height / rc.eval.vae_stride[1],
                       .width = p.refiner_width / rc.eval.vae_stride[2]};
  layout.text_len = m.refiner_tokens - layout.video_tokens();
  ASSERT_GT(layout.text_len, 0);
  const RefinerPlan plan = make_refiner_plan(layout, rc.arch, rc.eval.window);
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  Refiner model(rc.arch, w, *be);
  model.forward(plan, Tensor::zeros({layout.tokens(), plan.c_pad}, DType::F32));
  EXPECT_EQ(rf->activations, model.workspace_bytes() + 2 * 4 * static_cast<uint64_t>(layout.tokens()));
  // What the engine does when the refine phase ends: the decode phase holds the weights only.
  model.release_workspace();
  EXPECT_EQ(model.workspace_bytes(), 0u);
  const Tensor again = model.forward(plan, Tensor::zeros({layout.tokens(), plan.c_pad}, DType::F32));
  EXPECT_EQ(again.size(0), layout.tokens());
}

// A CUDA DiT (the text encoder on the host, so only the DiT, the refiner and
// the codecs share the device budget).
TEST(StageResidency, CudaBudgetsPickTheResidency) {
  const std::string dir = test::temp_dir("residency_budgets");
  EngineOptions o = tiny_options();
  o.device = "cuda";
  o.text_encoder_device = "cpu";
  o.refiner_device = "auto";
  o.decoder_device = "auto";
  MemoryPlanner planner(o, "cuda");
  const GenerateParams p = request_1080p(dir, "a");
  const MemoryPlan all = planner.plan(p, 0, "none");
  const StageMemory* d = all.stage("dit");
  const StageMemory* rf = all.stage("refiner");
  ASSERT_TRUE(d && rf);

  // Everything fits together: one residency, every phase holds the DiT and the refiner.
  const MemoryPlan together = planner.plan(p, all.peak_device, "test");
  EXPECT_TRUE(together.fits) << together.text();
  EXPECT_EQ(together.residency, Residency::Together);
  EXPECT_FALSE(together.refiner_swaps_dit);
  EXPECT_FALSE(together.codecs_alone);
  for (const MemoryPlan::Phase& ph : together.phases) {
    EXPECT_TRUE(ph.holds("dit")) << ph.name;
    EXPECT_TRUE(ph.holds("refiner")) << ph.name;
  }
  const MemoryPlan::Phase* refine = together.phase("refine");
  ASSERT_NE(refine, nullptr);
  EXPECT_GE(refine->device, d->weights + rf->total());

  // DiT + refiner do not fit: the DiT is freed before the refine phase, the
  // refiner before the next denoise; both phases fit alone.
  const uint64_t parted = budget_parting_dit_and_refiner(planner, p);
  const MemoryPlan swap = planner.plan(p, parted, "test");
  ASSERT_TRUE(swap.fits) << swap.text();
  EXPECT_TRUE(swap.refiner_swaps_dit) << swap.text();
  EXPECT_LT(parted, together.peak_device);  // the DiT and the refiner held together do not fit
  EXPECT_FALSE(swap.phase("refine")->holds("dit")) << swap.text();
  EXPECT_TRUE(swap.phase("refine")->holds("refiner"));
  EXPECT_FALSE(swap.phase("denoise")->holds("refiner")) << swap.text();
  EXPECT_NE(swap.text().find("the DiT is freed before the refiner uploads"), std::string::npos) << swap.text();
  EXPECT_TRUE(swap.json().at("refiner_swaps_dit").get<bool>());

  // Below the most parted plan's peak nothing fits: one error line naming the
  // phase at the peak, its stage and what would fit.
  const MemoryPlan least = planner.plan(p, 1, "test");
  ASSERT_FALSE(least.fits);
  EXPECT_TRUE(least.refiner_swaps_dit && least.codecs_alone) << least.text();
  const MemoryPlan none = planner.plan(p, least.peak_device - 1, "--max-device-memory");
  EXPECT_FALSE(none.fits) << none.text();
  EXPECT_EQ(none.advice.find('\n'), std::string::npos) << none.advice;
  for (const std::string& part : {std::string("phase ") + none.peak_device_phase, std::string("would fit"),
                                  std::string("--max-device-memory")})
    EXPECT_NE(none.advice.find(part), std::string::npos) << part << " in: " << none.advice;
  EXPECT_NE(none.text().find(none.advice), std::string::npos);
}

// The engine follows the plan on the CPU (a host budget that parts the DiT and
// the refiner): two 1080p samples free the DiT before each refine and reload
// it for the next denoise, and give the clips of an engine with everything
// resident (no stage is reloaded there).
TEST(StageResidency, EngineFreesTheDitBeforeTheRefinerAndReloadsIt) {
  const std::string dir = test::temp_dir("residency_engine");
  EngineOptions o = tiny_options();
  MemoryPlanner planner(o, "cpu");
  const uint64_t parted = budget_parting_dit_and_refiner(planner, request_1080p(dir, "x"));
  ASSERT_TRUE(planner.plan(request_1080p(dir, "x"), parted, "test").fits);

  auto run_two = [&](uint64_t budget, const std::string& tag, std::vector<ResidencyEvent>* log) {
    EngineOptions eo = o;
    eo.max_device_memory = budget;
    Engine engine(eo);
    std::vector<std::string> hashes;
    for (const char* name : {"a", "b"}) {
      const GenerateOutcome out = engine.generate(request_1080p(dir, tag + name));
      EXPECT_TRUE(out.decoded);
      hashes.push_back(out.report.hashes.video + out.report.hashes.audio);
      hashes.push_back(sha256_file_hex(dir + "/" + tag + name + ".safetensors"));
    }
    *log = engine.residency_log();
    return hashes;
  };
  std::vector<ResidencyEvent> kept, swapped;
  const std::vector<std::string> want = run_two(0, "kept_", &kept);
  const std::vector<std::string> got = run_two(parted, "swap_", &swapped);
  EXPECT_EQ(got, want);

  std::string trace;
  for (const ResidencyEvent& e : swapped) trace += (e.loaded ? "+" : "-") + e.stage + " ";
  // Never the DiT and the refiner at once; the refiner loads once per sample,
  // and the DiT is loaded again after the first refine (for the second sample).
  bool dit = false, refiner = false;
  int refiner_loads = 0, dit_reloads = 0;
  for (const ResidencyEvent& e : swapped) {
    if (e.stage == "dit") dit = e.loaded, dit_reloads += e.loaded && refiner_loads > 0;
    if (e.stage == "refiner") refiner = e.loaded, refiner_loads += e.loaded;
    EXPECT_FALSE(dit && refiner) << trace;
  }
  EXPECT_EQ(refiner_loads, 2) << trace;
  EXPECT_EQ(dit_reloads, 1) << trace;
  int kept_dit = 0, kept_refiner = 0;
  for (const ResidencyEvent& e : kept) kept_dit += e.stage == "dit", kept_refiner += e.stage == "refiner";
  EXPECT_EQ(kept_dit, 1);
  EXPECT_EQ(kept_refiner, 1);
  // The metrics list the second sample's events.
  const auto m = nlohmann::json::parse(read_text_file(dir + "/swap_b.json"));
  bool reload = false;
  for (const auto& e : m.at("residency_events")) reload |= e.at("stage") == "dit" && e.at("loaded").get<bool>();
  EXPECT_TRUE(reload) << m.at("residency_events").dump();
  EXPECT_TRUE(m.at("memory_plan").at("refiner_swaps_dit").get<bool>());
}

}  // namespace
}  // namespace magi2
