// The 1080p path end to end on the built-in tiny model, at a tiny size so it
// runs in seconds: `generate --resolution 1080p` (preview, then the refiner)
// and `refine --latents` from saved preview latents. The MP4 must have
// 8(T-1)+1 frames at 25 fps at the refiner size (T = the preview's latent
// frames, read from the saved latents), and both routes must give the same
// clip, and it plays in headless Chromium. Sizes come from the saved latents and the metrics file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "util/media_probe.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

using nlohmann::json;

std::string run(const std::string& cmd, int want_rc = 0) {
  static const std::string env = "MAGI2_CACHE_DIR=" + temp_dir("refine_cache") + " ";
  std::string out;
  const int rc = run_command(env + magi2_binary() + " " + cmd, &out);
  EXPECT_EQ(rc, want_rc) << out;
  return out;
}

std::string video_hash(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex(R"(video \[[0-9, ]+\] sha256 ([0-9a-f]{64}))")) ? m[1].str() : "";
}

const std::string kSize = " --width 64 --height 32 --refiner-width 128 --refiner-height 64 --seconds 1 ";

TEST(RefineCli, GenerateAt1080pAndRefineFromSavedLatents) {
  SKIP_WITHOUT_MP4();
  const std::string dir = temp_dir("refine_cli");
  // The preview alone, its latents saved.
  run("generate --model builtin:tiny --prompt 'a red kite' --resolution 540p" + kSize + "--num-inference-steps 2 "
      "--save-latents " + dir + "/preview.safetensors");
  // The same preview, then the refiner, in one run. Both routes run the refiner
  // on the DiT's device (--refiner-device auto: the CPU here, CUDA on a GPU host).
  const std::string a = run("generate --model builtin:tiny --prompt 'a red kite' --resolution 1080p" + kSize +
                            "--num-inference-steps 2 --refiner-num-inference-steps 2 --refiner-device auto -o " + dir +
                            "/a.mp4 --metrics " + dir + "/a.json");
  // The refiner on the saved latents.
  const std::string b = run("refine --model builtin:tiny --prompt 'a red kite' --latents " + dir +
                            "/preview.safetensors" + kSize + "--refiner-num-inference-steps 2 --refiner-device auto -o " +
                            dir + "/b.mp4");
  ASSERT_FALSE(video_hash(a).empty()) << a;
  EXPECT_EQ(video_hash(a), video_hash(b));

  auto lat = SafetensorsFile::open(dir + "/preview.safetensors");
  const int64_t t = lat->tensor("final_latent").size(2);
  const json m = json::parse(read_text_file(dir + "/a.json"));
  EXPECT_EQ(m.at("refiner_step_ms").size(), 2u);
  const json v = stream_of(ffprobe(dir + "/a.mp4"), "video");
  EXPECT_EQ(v.at("width"), 128);
  EXPECT_EQ(v.at("height"), 64);
  EXPECT_EQ(v.at("r_frame_rate"), "25/1");
  EXPECT_EQ(v.at("nb_frames"), std::to_string(8 * (t - 1) + 1));

  // The refined clip plays in a browser (issue 17): headless Chromium decodes a frame at the refiner size
  // and the audio track.
  SKIP_WITHOUT_TOOL("chromium");
  const std::string text = chromium_probe(dir, "a.mp4");
  ASSERT_NE(text, "pending") << "the page never loaded the video";
  const json r = json::parse(text);
  ASSERT_FALSE(r.contains("error")) << text;
  EXPECT_GE(r.at("readyState").get<int>(), 2) << text;  // HAVE_CURRENT_DATA: a frame was decoded
  EXPECT_EQ(r.at("width"), v.at("width"));
  EXPECT_EQ(r.at("height"), v.at("height"));
  EXPECT_EQ(r.at("audioChannels"), 2) << text;
  EXPECT_EQ(r.at("audioRate"), 44100) << text;
}

TEST(RefineCli, BadRequestsFailWithOneLine) {
  const std::string dir = temp_dir("refine_bad");
  std::string out = run("refine --model builtin:tiny --prompt x --latents " + dir + "/missing.safetensors -o " + dir +
                            "/x.mp4",
                        1);
  EXPECT_NE(out.find("--latents"), std::string::npos) << out;
  out = run("generate --model builtin:tiny --prompt x --resolution 1080p --refiner-width 100 -o " + dir + "/x.mp4", 1);
  EXPECT_NE(out.find("--refiner-width"), std::string::npos) << out;
}

}  // namespace
}  // namespace magi2::test
