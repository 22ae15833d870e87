// The main job end to end, as the README runs it: `magi2 generate --model
// builtin:tiny --prompt ... -o out.mp4` (tokenizer, Qwen3.5 text encoder, DiT,
// FlowUniPC, TurboVAE, Oobleck + resample, MP4 mux) for the default 10 s 272p
// clip, T2VA and I2VA. The MP4 is checked with ffprobe and played in headless
// Chromium; the raw-array SHA-256 digests must not depend on the thread count.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "io/mmap_file.h"
#include "util/media_probe.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

using nlohmann::json;

// builtin:tiny in a cache folder private to this test program.
std::string tiny_env() {
  static const std::string env = "MAGI2_CACHE_DIR=" + temp_dir("e2e_cache") + " ";
  return env;
}

std::string golden_image() { return golden_dir() + "/wan22_vae_encoder_tiny/ref_image.png"; }

// Runs generate with `args` and returns the stdout+stderr text (asserting success).
std::string generate(const std::string& args) {
  std::string out;
  const int rc = run_command(tiny_env() + magi2_binary() + " generate --model builtin:tiny " + args, &out);
  EXPECT_EQ(rc, 0) << out;
  return out;
}

std::string printed_hash(const std::string& out, const std::string& stream) {
  std::smatch m;
  const std::regex re(stream + R"( \[[0-9, ]+\] sha256 ([0-9a-f]{64}))");
  return std::regex_search(out, m, re) ? m[1].str() : std::string();
}

// The issue's contract for the default clip: 125 frames at 12.5 fps, 448x256,
// AAC stereo 44.1 kHz, both streams exactly 10 s; Chromium loads it as 10 s.
void expect_release_clip(const std::string& dir, const std::string& name) {
  const json probe = ffprobe(dir + "/" + name);
  const json& v = stream_of(probe, "video");
  const json& a = stream_of(probe, "audio");
  EXPECT_EQ(v.at("codec_name"), "h264");
  EXPECT_EQ(v.at("pix_fmt"), "yuv420p");
  EXPECT_EQ(v.at("width"), 448);
  EXPECT_EQ(v.at("height"), 256);
  EXPECT_EQ(v.at("r_frame_rate"), "25/2");
  EXPECT_EQ(v.at("nb_frames"), "125");
  EXPECT_TRUE(duration_is(v, 10, 1)) << v.dump();
  EXPECT_EQ(a.at("codec_name"), "aac");
  EXPECT_EQ(a.at("sample_rate"), "44100");
  EXPECT_EQ(a.at("channels"), 2);
  EXPECT_TRUE(duration_is(a, 10, 1)) << a.dump();
  std::printf("  ffprobe: %s %sx%s %s fps, %s frames, %s s | %s %s Hz x%d, %s s\n",
              v.at("codec_name").get<std::string>().c_str(), std::to_string(v.at("width").get<int>()).c_str(),
              std::to_string(v.at("height").get<int>()).c_str(), v.at("r_frame_rate").get<std::string>().c_str(),
              v.at("nb_frames").get<std::string>().c_str(), v.at("duration").get<std::string>().c_str(),
              a.at("codec_name").get<std::string>().c_str(), a.at("sample_rate").get<std::string>().c_str(),
              a.at("channels").get<int>(), a.at("duration").get<std::string>().c_str());
  if (!have_tool("chromium")) {
    std::printf("  chromium not installed: playback check skipped\n");
    return;
  }
  const std::string text = chromium_probe(dir, name);
  ASSERT_NE(text, "pending") << "the page never loaded the video";
  const json r = json::parse(text);
  ASSERT_FALSE(r.contains("error")) << text;
  EXPECT_EQ(r.at("duration"), 10);
  EXPECT_GE(r.at("readyState").get<int>(), 2);
  EXPECT_EQ(r.at("width"), 448);
  EXPECT_EQ(r.at("height"), 256);
  ASSERT_FALSE(r.contains("audioError")) << text;
  EXPECT_EQ(r.at("audioLength"), 441000);
  EXPECT_EQ(r.at("audioChannels"), 2);
}

TEST(GenerateEndToEnd, TextToVideoMp4OnBuiltinTiny) {
  SKIP_WITHOUT_MP4();
  SKIP_WITHOUT_TOOL("ffprobe");
  const std::string dir = temp_dir("e2e_t2v");
  const std::string out = generate("--prompt 'A red fox trots through fresh snow at dawn.' -o " + dir +
                                   "/t2v.mp4 --metrics " + dir + "/metrics.json");
  expect_release_clip(dir, "t2v.mp4");
  // The digests of the raw arrays are printed and written into the metrics.
  const json m = json::parse(read_text_file(dir + "/metrics.json"));
  EXPECT_EQ(m.at("outputs").at("video_sha256"), printed_hash(out, "video"));
  EXPECT_EQ(m.at("outputs").at("audio_sha256"), printed_hash(out, "audio"));
  EXPECT_EQ(m.at("outputs").at("video_shape"), json::parse("[125, 256, 448, 3]"));
  EXPECT_EQ(m.at("outputs").at("audio_shape"), json::parse("[441000, 2]"));
  std::printf("  wall time of the tiny end-to-end run: %.1f s (steps %s)\n",
              m.at("phase_ms").at("total").get<double>() / 1000.0, m.at("step_ms").dump().c_str());
}

TEST(GenerateEndToEnd, ImageToVideoMp4OnBuiltinTiny) {
  SKIP_WITHOUT_MP4();
  SKIP_WITHOUT_TOOL("ffprobe");
  const std::string dir = temp_dir("e2e_i2v");
  generate("--prompt 'The fox looks up at the camera.' --image " + golden_image() + " -o " + dir + "/i2v.mp4");
  expect_release_clip(dir, "i2v.mp4");
}

// Same seed, same bytes, whatever the thread count: a short I2VA clip through
// every stage, with frames and WAV side outputs.
TEST(GenerateEndToEnd, DigestsDoNotDependOnThreads) {
  const std::string dir = temp_dir("e2e_threads");
  const std::string args = "--prompt 'A small boat on a calm lake.' --image " + golden_image() +
                           " --seconds 1 --width 128 --height 64 --seed 7 ";
  const std::string one = generate(args + "--threads 1 --save-frames " + dir + "/f1 --save-audio " + dir + "/a1.wav");
  const std::string two = generate(args + "--threads 2 --save-frames " + dir + "/f2 --save-audio " + dir + "/a2.wav");
  ASSERT_FALSE(printed_hash(one, "video").empty()) << one;
  EXPECT_EQ(printed_hash(one, "video"), printed_hash(two, "video"));
  EXPECT_EQ(printed_hash(one, "audio"), printed_hash(two, "audio"));
  EXPECT_EQ(read_text_file(dir + "/a1.wav"), read_text_file(dir + "/a2.wav"));
  EXPECT_EQ(read_text_file(dir + "/f1/frame_00000.png"), read_text_file(dir + "/f2/frame_00000.png"));
}

// --decoder-device auto puts the codecs on the --device backend: with --device
// cpu that is the CPU reference again, so the same bytes (on a GPU host
// test_cuda_decoders compares the CUDA codecs with the CPU's).
TEST(GenerateEndToEnd, DecoderDeviceAutoFollowsTheDeviceBackend) {
  const std::string dir = temp_dir("e2e_decoder_device");
  const std::string args = "--prompt 'A small boat on a calm lake.' --image " + golden_image() +
                           " --seconds 1 --width 128 --height 64 --seed 7 --device cpu ";
  const std::string cpu = generate(args + "--decoder-device cpu --save-audio " + dir + "/c.wav");
  const std::string dev = generate(args + "--decoder-device auto --save-audio " + dir + "/d.wav");
  ASSERT_FALSE(printed_hash(cpu, "video").empty()) << cpu;
  EXPECT_EQ(printed_hash(cpu, "video"), printed_hash(dev, "video"));
  EXPECT_EQ(printed_hash(cpu, "audio"), printed_hash(dev, "audio"));
}

}  // namespace
}  // namespace magi2::test
