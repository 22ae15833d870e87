// `magi2 bench --stage decode`: the shapes it times are the pipeline's (the
// refiner's 1080p latent included), and bad --resolutions are one error line
// before any GPU work. The timing itself needs a GPU (docs/cuda.md).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench_decode.h"
#include "core/error.h"
#include "models/magi2_refiner/config.h"
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

TEST(BenchDecode, BadArgumentsAreOneLineErrors) {
  test::expect_one_line_error(magi2("bench --stage decode --resolutions 272p,720p --device cpu"), "--resolutions");
  // The step bench refuses 1080p before it makes any weight.
  test::expect_one_line_error(magi2("bench --resolutions 1080p --device cpu --layers 1"), "--resolutions");
  // The codecs at the release widths: the CPU backend is refused before any weight is written.
  test::expect_one_line_error(magi2("bench --stage decode --device cpu --decode-dir /nonexistent/x"),
                              "needs the CUDA backend");
}

}  // namespace
}  // namespace magi2
