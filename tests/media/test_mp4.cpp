// MP4 writer: stream parameters and exact durations as ffprobe reads them,
// decoded fidelity through ffmpeg, playback in headless Chromium, and the error
// contract (including the build without FFmpeg). Tools missing -> GTEST_SKIP.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "io/mmap_file.h"
#include "media/mp4.h"
#include "media_fixture.h"
#include "util/media_probe.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

TEST(Mp4, TenSecondClipHasExactStreams) {
  SKIP_WITHOUT_MP4();
  SKIP_WITHOUT_TOOL("ffprobe");
  const std::string dir = temp_dir("mp4");
  const std::string path = dir + "/clip.mp4";
  const Clip clip = synthetic_clip(125, 256, 448, 441000);
  write_mp4(path, clip);
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename(), "clip.mp4");
  std::printf("  %s, %lld bytes\n", mp4_library_versions().c_str(),
              static_cast<long long>(fs::file_size(path)));

  const json p = ffprobe(path);
  const json& v = stream_of(p, "video");
  EXPECT_EQ(v.at("codec_name"), "h264");
  EXPECT_EQ(v.at("pix_fmt"), "yuv420p");
  EXPECT_EQ(v.at("width"), 448);
  EXPECT_EQ(v.at("height"), 256);
  EXPECT_EQ(v.at("r_frame_rate"), "25/2");
  EXPECT_EQ(v.at("avg_frame_rate"), "25/2");
  EXPECT_EQ(v.at("nb_frames"), "125");
  EXPECT_EQ(v.at("color_space"), "smpte170m");
  EXPECT_EQ(v.at("duration"), "10.000000");
  EXPECT_TRUE(duration_is(v, 10, 1)) << v.dump();
  const json& a = stream_of(p, "audio");
  EXPECT_EQ(a.at("codec_name"), "aac");
  EXPECT_EQ(a.at("sample_rate"), "44100");
  EXPECT_EQ(a.at("channels"), 2);
  EXPECT_EQ(a.at("channel_layout"), "stereo");
  EXPECT_EQ(a.at("duration"), "10.000000");
  EXPECT_EQ(a.at("duration_ts"), 441000);
  EXPECT_EQ(a.at("time_base"), "1/44100");
  EXPECT_TRUE(duration_is(a, 10, 1)) << a.dump();
  EXPECT_EQ(p.at("format").at("duration"), "10.000000");
  EXPECT_EQ(p.at("format").at("tags").at("encoder").get<std::string>().rfind("Lavf", 0), 0u);
  std::printf("  video: h264 %s %dx%d r_frame_rate %s nb_frames %s duration %s (%lld x %s)\n",
              v.at("pix_fmt").get<std::string>().c_str(), v.at("width").get<int>(),
              v.at("height").get<int>(), v.at("r_frame_rate").get<std::string>().c_str(),
              v.at("nb_frames").get<std::string>().c_str(), v.at("duration").get<std::string>().c_str(),
              static_cast<long long>(v.at("duration_ts").get<int64_t>()),
              v.at("time_base").get<std::string>().c_str());
  std::printf("  audio: aac %s Hz %d ch duration %s (%lld x %s), %s packets; format duration %s\n",
              a.at("sample_rate").get<std::string>().c_str(), a.at("channels").get<int>(),
              a.at("duration").get<std::string>().c_str(),
              static_cast<long long>(a.at("duration_ts").get<int64_t>()),
              a.at("time_base").get<std::string>().c_str(), a.at("nb_frames").get<std::string>().c_str(),
              p.at("format").at("duration").get<std::string>().c_str());

  // Decoded fidelity (ffmpeg, BT.601 back to RGB): frame 0 and the audio.
  if (!have_tool("ffmpeg")) return;
  std::string log;
  ASSERT_EQ(run_command("ffmpeg -v error -y -i '" + path + "' -frames:v 1 -f rawvideo -pix_fmt rgb24 '" +
                            dir + "/f0.rgb' -map 0:a -f f32le '" + dir + "/a.f32'",
                        &log),
            0)
      << log;
  const auto rgb = read_bytes(dir + "/f0.rgb");
  ASSERT_EQ(rgb.size(), size_t{256 * 448 * 3});
  double se = 0;
  for (size_t i = 0; i < rgb.size(); ++i) {
    const double d = double(rgb[i]) - clip.frames.data_as<uint8_t>()[i];
    se += d * d;
  }
  const double psnr = 10 * std::log10(255.0 * 255.0 / (se / rgb.size()));
  const auto pcm = read_bytes(dir + "/a.f32");
  // ffmpeg drops the priming but keeps the last frame's padding: >= N samples.
  ASSERT_GE(pcm.size(), size_t{441000 * 2 * 4});
  const auto* dec = reinterpret_cast<const float*>(pcm.data());
  double sig = 0, err = 0;
  for (int64_t i = 0; i < 441000 * 2; ++i) {
    const double x = clip.audio.data_as<float>()[i];
    sig += x * x;
    err += (dec[i] - x) * (dec[i] - x);
  }
  const double snr = 10 * std::log10(sig / err);
  std::printf("  decoded frame 0 PSNR %.2f dB; decoded audio SNR %.2f dB (%zu samples decoded)\n", psnr,
              snr, pcm.size() / 8);
  EXPECT_GT(psnr, 35.0);
  EXPECT_GT(snr, 20.0);
}

TEST(Mp4, OddLengthsAndVideoOnlyStayExact) {
  SKIP_WITHOUT_MP4();
  SKIP_WITHOUT_TOOL("ffprobe");
  const std::string dir = temp_dir("mp4odd");
  // 37 frames = 2.96 s of video; 352877 samples (not a multiple of 1024, not a
  // whole millisecond) = 8.0017 s of audio.
  write_mp4(dir + "/odd.mp4", synthetic_clip(37, 96, 128, 352877));
  const json p = ffprobe(dir + "/odd.mp4");
  const json& v = stream_of(p, "video");
  const json& a = stream_of(p, "audio");
  EXPECT_EQ(v.at("nb_frames"), "37");
  EXPECT_TRUE(duration_is(v, 296, 100)) << v.dump();
  EXPECT_EQ(a.at("duration_ts"), 352877) << a.dump();
  EXPECT_TRUE(duration_is(a, 352877, 44100)) << a.dump();
  std::printf("  odd: video %s s, audio %lld samples = %s s\n", v.at("duration").get<std::string>().c_str(),
              static_cast<long long>(a.at("duration_ts").get<int64_t>()),
              a.at("duration").get<std::string>().c_str());

  Clip silent = synthetic_clip(5, 64, 64, 10);
  silent.audio = Tensor();
  write_mp4(dir + "/video_only.mp4", silent);
  const json q = ffprobe(dir + "/video_only.mp4");
  ASSERT_EQ(q.at("streams").size(), 1u);
  EXPECT_TRUE(duration_is(stream_of(q, "video"), 5 * 2, 25));
}

TEST(Mp4, Errors) {
  const std::string dir = temp_dir("mp4err");
  if (!mp4_supported()) {
    EXPECT_TRUE(throws_with([&] { write_mp4(dir + "/x.mp4", synthetic_clip(2, 8, 8, 10)); },
                            {"x.mp4", "no FFmpeg", "--save-frames", "--save-audio"}));
    return;
  }
  EXPECT_TRUE(throws_with([&] { write_mp4(dir + "/odd.mp4", synthetic_clip(2, 8, 7, 10)); },
                          {"odd.mp4", "even", "7x8"}));
  Clip c = synthetic_clip(2, 8, 8, 10);
  c.fps = 0;
  EXPECT_TRUE(throws_with([&] { write_mp4(dir + "/fps.mp4", c); }, {"fps.mp4", "frame rate"}));
  c = synthetic_clip(2, 8, 8, 10);
  c.audio = Tensor::zeros({10, 1}, DType::F32);
  EXPECT_TRUE(throws_with([&] { write_mp4(dir + "/mono.mp4", c); }, {"mono.mp4", "[N, 2]"}));
  EXPECT_TRUE(throws_with([&] { write_mp4(dir + "/crf.mp4", synthetic_clip(2, 8, 8, 10), {.crf = 60}); },
                          {"crf.mp4", "crf"}));
  EXPECT_TRUE(throws_with([&] { write_mp4(dir + "/no/such/dir/x.mp4", synthetic_clip(2, 8, 8, 10)); },
                          {"x.mp4"}));
  for (const auto& e : fs::directory_iterator(dir)) ADD_FAILURE() << "left behind: " << e.path();
}

TEST(Mp4, PlaysInHeadlessChromium) {
  SKIP_WITHOUT_MP4();
  SKIP_WITHOUT_TOOL("chromium");
  const std::string dir = temp_dir("mp4web");
  const Clip clip = synthetic_clip(125, 256, 448, 441000);
  write_mp4(dir + "/clip.mp4", clip);
  const std::string text = chromium_probe(dir, "clip.mp4");
  ASSERT_NE(text, "pending") << "the page never loaded the video";
  const json r = json::parse(text);
  ASSERT_FALSE(r.contains("error")) << text;
  EXPECT_EQ(r.at("duration"), 10);
  EXPECT_GE(r.at("readyState").get<int>(), 2);  // HAVE_CURRENT_DATA: a frame was decoded
  EXPECT_EQ(r.at("width"), 448);
  EXPECT_EQ(r.at("height"), 256);
  double mean = 0;
  const uint8_t* f0 = clip.frames.data_as<uint8_t>();
  for (int64_t i = 0; i < 256 * 448 * 3; ++i) mean += f0[i];
  mean /= 256.0 * 448 * 3;
  EXPECT_NEAR(r.at("meanRGB").get<double>(), mean, 3.0);
  ASSERT_FALSE(r.contains("audioError")) << text;
  EXPECT_EQ(r.at("audioLength"), 441000);  // the edit list hides priming and padding
  EXPECT_EQ(r.at("audioRate"), 44100);
  EXPECT_EQ(r.at("audioChannels"), 2);
}

}  // namespace
}  // namespace magi2::test
