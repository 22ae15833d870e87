// write_outputs / check_output_plan: what `magi2 generate` calls after decoding.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "io/mmap_file.h"
#include "media/outputs.h"
#include "media/png.h"
#include "media_fixture.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

namespace fs = std::filesystem;

TEST(Outputs, WritesEveryRequestedOutputAndReportsDigests) {
  const std::string dir = temp_dir("outputs");
  const Clip clip = synthetic_clip(10, 64, 96, 35280);  // 0.8 s
  OutputPlan plan;
  if (mp4_supported()) plan.mp4_path = dir + "/clip.mp4";
  plan.frames_dir = dir + "/frames/new";
  plan.wav_path = dir + "/clip.wav";
  plan.wav_format = WavFormat::Float32;
  plan.output_width = 48;
  plan.output_height = 32;
  check_output_plan(plan, 96, 64);
  const OutputReport r = write_outputs(clip, plan);

  const Tensor resized = resize_frames_bilinear(clip.frames, 48, 32);
  EXPECT_EQ(r.hashes.video, tensor_sha256_hex(resized));
  EXPECT_EQ(r.video_sha256_decoded, tensor_sha256_hex(clip.frames));
  EXPECT_EQ(r.hashes.audio, tensor_sha256_hex(clip.audio));
  EXPECT_EQ(r.video_shape, (Shape{10, 32, 48, 3}));
  const Tensor f9 = read_png_rgb(plan.frames_dir + "/" + frame_png_name(9));
  EXPECT_EQ(std::memcmp(f9.data(), resized.data_as<uint8_t>() + 9 * 32 * 48 * 3, f9.nbytes()), 0);
  EXPECT_FALSE(fs::exists(plan.frames_dir + "/" + frame_png_name(10)));
  if (sndfile_supported()) {
    int sr = 0;
    const Tensor a = read_wav(plan.wav_path, &sr);
    EXPECT_EQ(sr, 44100);
    EXPECT_EQ(tensor_sha256_hex(a), r.hashes.audio);  // float32 WAV keeps the exact samples
  }
  const nlohmann::json j = r.to_json(plan);
  std::printf("  %s\n", j.dump().c_str());
  EXPECT_EQ(j.at("video_sha256"), r.hashes.video);
  EXPECT_EQ(j.at("audio_sha256"), r.hashes.audio);
  EXPECT_EQ(j.at("video_shape"), nlohmann::json({10, 32, 48, 3}));
  EXPECT_EQ(j.at("audio_shape"), nlohmann::json({35280, 2}));
  EXPECT_EQ(j.at("fps"), 12.5);
  EXPECT_EQ(j.at("sample_rate"), 44100);
  EXPECT_EQ(j.at("resize").at("rounding"), "truncate");
  EXPECT_EQ(j.at("wav").at("format"), "float32");
  if (mp4_supported()) {
    EXPECT_EQ(j.at("mp4").at("sha256"), sha256_file_hex(plan.mp4_path));
    EXPECT_EQ(j.at("mp4").at("crf"), 18);
    // Fixed x264 thread count: the same clip gives the same bytes again.
    const OutputReport again = write_outputs(clip, plan);
    EXPECT_EQ(again.mp4_sha256, r.mp4_sha256);
  }
}

TEST(Outputs, PlanErrorsNameTheFlag) {
  const std::string dir = temp_dir("plan");
  OutputPlan p;
  p.output_width = 64;
  EXPECT_TRUE(throws_with([&] { check_output_plan(p, 96, 64); }, {"--output-width", "--output-height"}));
  p = OutputPlan{};
  p.mp4_path = dir + "/a.mp4";
  if (!mp4_supported()) {
    EXPECT_TRUE(throws_with([&] { check_output_plan(p, 96, 64); }, {"a.mp4", "--save-frames", "--save-audio"}));
  } else {
    check_output_plan(p, 96, 64);
    p.output_width = 47;
    p.output_height = 32;
    EXPECT_TRUE(throws_with([&] { check_output_plan(p, 96, 64); }, {"a.mp4", "even", "47x32"}));
    p = OutputPlan{};
    p.mp4_path = dir + "/a.mov";
    EXPECT_TRUE(throws_with([&] { check_output_plan(p, 96, 64); }, {"a.mov", ".mp4"}));
    p.mp4_path = dir + "/missing/a.mp4";
    EXPECT_TRUE(throws_with([&] { check_output_plan(p, 96, 64); }, {"-o", "missing", "does not exist"}));
  }
  p = OutputPlan{};
  p.wav_path = dir + "/missing/a.wav";
  EXPECT_TRUE(throws_with([&] { check_output_plan(p, 96, 64); }, {"--save-audio", "missing"}));
  p = OutputPlan{};
  write_file_atomic(dir + "/file", "x");
  p.frames_dir = dir + "/file";
  EXPECT_TRUE(throws_with([&] { check_output_plan(p, 96, 64); }, {"--save-frames", "not a directory"}));
  p.frames_dir = dir + "/a/b/c";  // created on write
  check_output_plan(p, 96, 64);
  Clip silent = synthetic_clip(2, 8, 8, 10);
  silent.audio = Tensor();
  p = OutputPlan{};
  p.wav_path = dir + "/s.wav";
  EXPECT_TRUE(throws_with([&] { write_outputs(silent, p); }, {"--save-audio", "no audio"}));
}

}  // namespace
}  // namespace magi2::test
