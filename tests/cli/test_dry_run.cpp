// `magi2 generate --dry-run` prints the memory plan and exits 0 without
// loading weights; --max-device-memory too small stops the run before loading
// with one line saying what would fit (engine/memory_plan.h).
// The plans are for -o *.mp4, which a build without FFmpeg refuses up front:
// those tests skip there (SKIP_WITHOUT_MP4).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/mmap_file.h"
#include "util/cli.h"
#include "util/media_probe.h"

namespace magi2::test {
namespace {

std::string tiny(const std::string& args) {
  static const std::string env = "MAGI2_CACHE_DIR=" + temp_dir("dry_run_cache") + " ";
  return env + magi2_binary() + " generate --model builtin:tiny --prompt 'A red fox in the snow.' " + args;
}

CliRun run(const std::string& cmd) {
  CliRun r;
  r.rc = run_command(cmd, &r.out);
  return r;
}

TEST(DryRun, PrintsThePlanAndWritesNothingElse) {
  SKIP_WITHOUT_MP4();
  const std::string dir = temp_dir("dry_run");
  const CliRun r = run(tiny("-o " + dir + "/fox.mp4 --dry-run --metrics " + dir + "/plan.json"));
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* w : {"memory plan", "text_encoder", "dit", "turbovae_decode", "oobleck_decode", "peak host",
                        "formula", "fits"})
    EXPECT_NE(r.out.find(w), std::string::npos) << w << " missing in: " << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/fox.mp4"));
  const auto j = nlohmann::json::parse(read_text_file(dir + "/plan.json"));
  EXPECT_TRUE(j.at("dry_run").get<bool>());
  const auto& plan = j.at("memory_plan");
  EXPECT_EQ(plan.at("stages").size(), 4u);
  EXPECT_GT(plan.at("peak_host_bytes").get<uint64_t>(), 0u);
  EXPECT_TRUE(plan.at("fits").get<bool>());
  EXPECT_TRUE(plan.at("problems").empty());
  // The FP8 modes, as a run's metrics carry them.
  EXPECT_EQ(j.at("weights"), "bf16");
  EXPECT_EQ(j.at("fp8_compute"), "none");
  EXPECT_EQ(j.at("attention_compute"), "bf16");
  EXPECT_EQ(j.at("linear_compute"), "bf16");
  EXPECT_NE(r.out.find("(experts bf16, attention bf16, linears bf16)"), std::string::npos) << r.out;
}

// The CUDA FP8 linear needs widths that are multiples of 128; the tiny model's
// are not. The dry run says so (exit 0, as for a plan that does not fit).
TEST(DryRun, SaysWhatTheGpuCannotRun) {
  SKIP_WITHOUT_MP4();
  const std::string dir = temp_dir("dry_run_fp8");
  const CliRun r = run(tiny("-o " + dir + "/fox.mp4 --dry-run --device cuda --max-device-memory 40GiB "
                            "--linear-compute fp8 --metrics " + dir + "/plan.json"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("will fail: --linear-compute fp8 on CUDA needs the dense linears' in and out widths to be "
                       "multiples of 128"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(read_text_file(dir + "/plan.json"));
  EXPECT_EQ(j.at("linear_compute"), "fp8");
  EXPECT_EQ(j.at("memory_plan").at("problems").size(), 1u);
  // The CPU backend runs any width.
  const CliRun cpu = run(tiny("-o " + dir + "/fox.mp4 --dry-run --device cpu --linear-compute fp8"));
  ASSERT_EQ(cpu.rc, 0) << cpu.out;
  EXPECT_EQ(cpu.out.find("will fail"), std::string::npos) << cpu.out;
}

TEST(DryRun, PlansForAGpuAnywhere) {
  SKIP_WITHOUT_MP4();
  const std::string dir = temp_dir("dry_run_gpu");
  const CliRun r = run(tiny("-o " + dir + "/fox.mp4 --dry-run --device cuda --max-device-memory 40GiB "
                            "--resolution 540p --image " + golden_dir() + "/wan22_vae_encoder_tiny/ref_image.png"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("DiT on cuda"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wan22_encode"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak device"), std::string::npos) << r.out;
}

TEST(DryRun, LayerwiseOffloadPinsTheLayersOnTheHost) {
  const std::string dir = temp_dir("dry_run_offload");
  const CliRun r = run(tiny("--save-latents " + dir + "/l.safetensors --dry-run --device cuda --max-device-memory "
                            "40GiB --offload layerwise --metrics " + dir + "/plan.json"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("--offload layerwise: non-layer tensors + 2 layer slots"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("in pinned host memory"), std::string::npos) << r.out;
  const std::string plan = read_text_file(dir + "/plan.json");
  EXPECT_NE(plan.find("\"pinned_host_bytes\""), std::string::npos);
}

TEST(DryRun, TooSmallABudgetStopsBeforeLoading) {
  SKIP_WITHOUT_MP4();
  const std::string dir = temp_dir("dry_run_small");
  const CliRun r = run(tiny("-o " + dir + "/fox.mp4 --device cpu --max-device-memory 64KiB --metrics " + dir +
                            "/m.json"));
  expect_one_line_error(r, "would fit");
  EXPECT_NE(r.out.find("--weights fp8-experts"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("--offload layerwise"), std::string::npos) << r.out;  // the CPU backend streams nothing
  EXPECT_FALSE(std::filesystem::exists(dir + "/m.json"));
  expect_one_line_error(run(tiny("-o " + dir + "/fox.mp4 --max-device-memory lots")), "--max-device-memory");
}

}  // namespace
}  // namespace magi2::test
