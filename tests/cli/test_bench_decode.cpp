// `magi2 bench --stage decode`: the shapes it times are the pipeline's (the
// refiner's 1080p latent included), and bad --resolutions are one error line
// before any GPU work. The timing itself needs a GPU (docs/cuda-stages.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "bench_decode.h"
#include "core/error.h"
#include "models/magi2_refiner/config.h"
#include "ops/ops.h"
#include "pipeline/refine.h"
#include "util/cli.h"
#include "util/testing.h"

namespace magi2 {
namespace {

using test::magi2;

TEST(BenchDecode, TargetsAreThePipelinesLatents) {
  const cli::DecodeTarget t272 = cli::decode_target("272p");
  EXPECT_EQ(t272.latent, (Shape{1, 48, 32, 16, 28}));
  EXPECT_EQ(t272.preview_width, 448);
  EXPECT_EQ(t272.preview_height, 256);
  EXPECT_EQ(t272.audio_frames, 250);
  const cli::DecodeTarget t540 = cli::decode_target("540p");
  EXPECT_EQ(t540.latent, (Shape{1, 48, 32, 32, 56}));
  EXPECT_EQ(t540.preview_width, 896);
  // 1080p: the 540p preview's 32 frames resampled to 2T-1 on the 25 fps timeline, 1920x1088 / 16.
  const cli::DecodeTarget t1080 = cli::decode_target("1080p");
  EXPECT_EQ(t1080.latent, (Shape{1, 48, 63, 68, 120}));
  EXPECT_EQ(t1080.preview_width, 896);
  EXPECT_EQ(t1080.preview_height, 512);
  EXPECT_EQ(t1080.audio_frames, 250);
}

TEST(BenchDecode, RefinedLatentSize) {
  const RefinerEval ev = RefinerConfig::release().eval;
  const RefinedLatentSize r = refined_latent_size(ev, 32, 1920, 1088);
  EXPECT_EQ(r.frames, 63);
  EXPECT_EQ(r.height, 68);
  EXPECT_EQ(r.width, 120);
  // The pixel size is rounded down to whole cells, as the official code.
  EXPECT_EQ(refined_latent_size(ev, 1, 1935, 1100).width, 120);
  EXPECT_EQ(refined_latent_size(ev, 1, 1935, 1100).frames, 1);
  EXPECT_TRUE(test::throws_with([&] { refined_latent_size(ev, 32, 15, 1088); }, {"below one latent cell"}));
  EXPECT_TRUE(test::throws_with([&] { refined_latent_size(ev, 0, 1920, 1088); }, {"no frame"}));
}

TEST(BenchDecode, ResolutionList) {
  EXPECT_EQ(cli::parse_decode_resolutions("272p,540p"), (std::vector<std::string>{"272p", "540p"}));
  EXPECT_EQ(cli::parse_decode_resolutions(",1080p,"), (std::vector<std::string>{"1080p"}));
  EXPECT_TRUE(test::throws_with([] { cli::parse_decode_resolutions("272p,720p"); }, {"--resolutions", "720p"}));
  EXPECT_TRUE(test::throws_with([] { cli::parse_decode_resolutions("540p,540p"); }, {"--resolutions", "twice"}));
  EXPECT_TRUE(test::throws_with([] { cli::parse_decode_resolutions(","); }, {"--resolutions"}));
}

// The bench's whole flow (writers, ClipDecoders, the Wan2.2 encoder from a
// PNG, the entries) at the tiny widths on the CPU: what the GPU run does at
// the release widths, minus the widths.
TEST(BenchDecode, TheWholeFlowRunsAtTinyWidths) {
  auto be = make_cpu_backend();
  cli::DecodeBenchArgs a{.dir = test::temp_dir("bench_decode"), .resolutions = {"272p"}, .steps = 1, .warmup = 0,
                         .tiny_widths = true};
  std::vector<std::string> seen;
  a.on_entry = [&](const std::string& codec, const nlohmann::json& e) {
    seen.push_back(codec);
    EXPECT_GT(e["model_ms"].get<double>(), 0) << codec;
    EXPECT_GT(e["pipeline_ms"].get<double>(), 0) << codec;
  };
  const nlohmann::json j = cli::bench_decode(a, *be);
  EXPECT_EQ(seen, (std::vector<std::string>{"turbovae", "oobleck", "wan22_encoder"}));
  ASSERT_EQ(j["turbovae"].size(), 1u);
  EXPECT_EQ(j["turbovae"][0]["input"], nlohmann::json({1, 48, 32, 16, 28}));
  EXPECT_EQ(j["turbovae"][0]["output"], nlohmann::json({125, 256, 448, 3}));
  EXPECT_EQ(j["oobleck"]["input"], nlohmann::json({250, 64}));
  EXPECT_EQ(j["oobleck"]["output"], nlohmann::json({441000, 2}));
  ASSERT_EQ(j["wan22_encoder"].size(), 1u);
  EXPECT_EQ(j["wan22_encoder"][0]["input"], nlohmann::json({3, 256, 448}));
  EXPECT_EQ(j["wan22_encoder"][0]["output"], nlohmann::json({48, 1, 16, 28}));
  EXPECT_TRUE(j["turbovae"][0]["peak_allocated_bytes"].is_null());  // device bytes: CUDA only
  // A CUDA-less backend without tiny_widths is refused before anything is written.
  a.tiny_widths = false;
  a.dir = test::temp_dir("bench_decode_cpu");
  EXPECT_TRUE(test::throws_with([&] { cli::bench_decode(a, *be); }, {"needs the CUDA backend"}));
  EXPECT_FALSE(std::filesystem::exists(a.dir + "/turbo_vae"));
}

TEST(BenchDecode, BadArgumentsAreOneLineErrors) {
  test::expect_one_line_error(magi2("bench --stage decode --resolutions 272p,720p --device cpu"), "--resolutions");
  // The step bench refuses 1080p before it makes any weight.
  test::expect_one_line_error(magi2("bench --resolutions 1080p --device cpu --layers 1"), "--resolutions");
  // The codecs at the release widths: the CPU backend is refused before any weight is written.
  test::expect_one_line_error(magi2("bench --stage decode --device cpu --decode-dir /nonexistent/x"),
                              "needs the CUDA backend");
  // --max-device-memory (a smaller GPU on a large one): a bad size, or a backend without a GPU to hold.
  test::expect_one_line_error(magi2("bench --device cpu --layers 1 --max-device-memory lots"),
                              "--max-device-memory");
  test::expect_one_line_error(magi2("bench --device cpu --layers 1 --max-device-memory 40GiB"),
                              "needs the CUDA backend");
}

}  // namespace
}  // namespace magi2
