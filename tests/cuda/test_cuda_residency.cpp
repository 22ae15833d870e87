// Stage residency on the GPU (engine/memory_plan.h, issue 17): the built-in
// tiny model's 1080p generate on CUDA (the preview, the refiner and the codecs
// on the device, --refiner-device and --decoder-device auto) under a
// --max-device-memory budget that parts the DiT and the refiner gives the
// bytes of a run where everything stays resident, and the residency log shows
// the DiT freed before each refine and reloaded for the next sample. The
// budgets come from the planner, the sizes from the model's files. Seconds.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cuda/backend_cuda.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "engine/tiny_model.h"
#include "io/mmap_file.h"
#include "media/sha256.h"
#include "util/testing.h"

namespace magi2 {
namespace {

EngineOptions tiny_cuda_options() {
  static const std::string cache = test::temp_dir("cuda_residency_cache");
  EngineOptions o;
  o.model = kBuiltinTiny;
  o.cache.cache_dir = cache;
  o.device = "cuda";
  o.refiner_device = "auto";
  o.decoder_device = "auto";
  o.threads = 2;
  return o;
}

// The preview at 64x32, the refiner to 128x64, decoded (the hashes of the arrays) and the latents saved.
GenerateParams request_1080p(const std::string& dir, const std::string& name) {
  GenerateParams p;
  p.prompt = "A red kite over a windy beach.";
  p.resolution = "1080p";
  p.seconds = 1;
  p.width = 64;
  p.height = 32;
  p.refiner_width = 128;
  p.refiner_height = 64;
  p.steps = 2;
  p.refiner_steps = 2;
  p.latents_path = dir + "/" + name + ".safetensors";
  p.metrics_path = dir + "/" + name + ".json";
  p.outputs.wav_path = dir + "/" + name + ".wav";
  return p;
}

TEST(CudaResidency, DitFreedBeforeTheRefinerGivesTheResidentBytes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU present";
  const std::string dir = test::temp_dir("cuda_residency");
  const EngineOptions o = tiny_cuda_options();
  MemoryPlanner planner(o, "cuda");
  const GenerateParams probe = request_1080p(dir, "probe");
  // Everything resident: the plan's own peak. Parted: one byte below each
  // plan's peak until the planner frees the DiT before the refiner.
  const MemoryPlan all = planner.plan(probe, 0, "none");
  const uint64_t resident = all.peak_device;
  uint64_t parted = resident - 1;
  for (;;) {
    const MemoryPlan m = planner.plan(probe, parted, "test");
    ASSERT_TRUE(m.fits) << m.text();
    if (m.refiner_swaps_dit) break;
    parted = m.peak_device - 1;
  }
  ASSERT_FALSE(planner.plan(probe, resident, "test").refiner_swaps_dit);
  std::printf("budgets: resident %llu bytes, parted %llu bytes\n%s", (unsigned long long)resident,
              (unsigned long long)parted, planner.plan(probe, parted, "test").text().c_str());

  auto run_two = [&](uint64_t budget, const std::string& tag, std::vector<ResidencyEvent>* log) {
    EngineOptions eo = o;
    eo.max_device_memory = budget;
    Engine engine(eo);
    std::vector<std::string> out;
    for (const char* name : {"a", "b"}) {
      const GenerateOutcome g = engine.generate(request_1080p(dir, tag + name));
      EXPECT_TRUE(g.decoded);
      out.push_back(g.report.hashes.video);
      out.push_back(g.report.hashes.audio);
      out.push_back(sha256_file_hex(dir + "/" + tag + name + ".safetensors"));
    }
    *log = engine.residency_log();
    return out;
  };
  std::vector<ResidencyEvent> kept, swapped;
  const std::vector<std::string> want = run_two(resident, "kept_", &kept);
  const std::vector<std::string> got = run_two(parted, "swap_", &swapped);
  EXPECT_EQ(got, want) << "video, audio and latent hashes of both samples";

  auto trace_of = [](const std::vector<ResidencyEvent>& log) {
    std::string t;
    for (const ResidencyEvent& e : log) t += (e.loaded ? "+" : "-") + e.stage + " ";
    return t;
  };
  const std::string trace = trace_of(swapped);
  std::printf("resident: %s\nparted:   %s\n", trace_of(kept).c_str(), trace.c_str());
  // Parted: never the DiT and the refiner at once; the refiner uploads once per
  // sample; the DiT reloads once, for the second sample.
  bool dit = false, refiner = false;
  int refiner_loads = 0, dit_reloads = 0;
  for (const ResidencyEvent& e : swapped) {
    if (e.stage == "dit") dit = e.loaded, dit_reloads += e.loaded && refiner_loads > 0;
    if (e.stage == "refiner") refiner = e.loaded, refiner_loads += e.loaded;
    EXPECT_FALSE(dit && refiner) << trace;
  }
  EXPECT_EQ(refiner_loads, 2) << trace;
  EXPECT_EQ(dit_reloads, 1) << trace;
  // Resident: the DiT and the refiner load once and are never freed.
  for (const ResidencyEvent& e : kept) {
    if (e.stage == "dit" || e.stage == "refiner") {
      EXPECT_TRUE(e.loaded) << trace_of(kept);
    }
  }
  const auto m = nlohmann::json::parse(read_text_file(dir + "/swap_b.json"));
  EXPECT_TRUE(m.at("memory_plan").at("refiner_swaps_dit").get<bool>());
  EXPECT_GT(m.at("residency_events").size(), 0u);
}

}  // namespace
}  // namespace magi2
