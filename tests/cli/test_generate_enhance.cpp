// `magi2 generate --enhance-prompt` on builtin:tiny against a loopback
// OpenAI-compatible server (tests/util/fake_openai.h): the enhanced Markdown is
// what the text encoder gets, --save-prompt writes it (FILE.json replays the
// run byte for byte through --samples), metrics record PE time and prompt
// length without the key, and PE faults stop the run before anything is written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "util/cli.h"
#include "util/fake_openai.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

namespace fs = std::filesystem;

const std::string kKey = "sk-test-GenerateKey42";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The first T2V fixture case: {caption JSON, rendered Markdown}.
std::pair<std::string, std::string> t2v_fixture() {
  const std::string dir = golden_dir() + "/prompt_enhancement/";
  const nlohmann::json cases = nlohmann::json::parse(slurp(dir + "cases.json")).at("cases");
  for (const auto& c : cases)
    if (c.at("task") == "t2v") return {slurp(dir + c.at("json").get<std::string>()), slurp(dir + c.at("markdown").get<std::string>())};
  ADD_FAILURE() << "no t2v case";
  return {};
}

class GenerateEnhance : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = temp_dir("generate_enhance"); }
  // builtin:tiny in a cache private to this test process, a short latents-only run.
  CliRun generate(const std::string& extra) {
    static const std::string cache = temp_dir("generate_enhance_cache");
    CliRun r;
    r.rc = run_command("env -u OPENAI_API_KEY -u OPENAI_BASE_URL MAGI2_CACHE_DIR=" + cache + " OPENAI_API_KEY=" +
                           kKey + " " + magi2_binary() +
                           " generate --model builtin:tiny --seconds 1 --width 96 --height 64 "
                           "--num-inference-steps 1 --no-decode --threads 1 " +
                           extra,
                       &r.out);
    return r;
  }
  std::string dir_;
  FakeOpenAI server_;
};

TEST_F(GenerateEnhance, EnhancedPromptIsEncodedSavedAndReplayable) {
  const auto [caption, md] = t2v_fixture();
  server_.script({{200, chat_answer(caption)}});
  const std::string lat = dir_ + "/lat.safetensors", saved = dir_ + "/prompt.json", metrics = dir_ + "/m.json";
  const CliRun r = generate("--prompt 'A red fox in the snow.' --enhance-prompt --pe-base-url " + server_.base_url() +
                            " --save-prompt " + saved + " --save-latents " + lat + " --metrics " + metrics);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("prompt enhancement: t2v via " + server_.base_url()), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(kKey), std::string::npos) << r.out;
  ASSERT_EQ(server_.seen().size(), 1u);
  EXPECT_EQ(server_.seen()[0].authorization, "Bearer " + kKey);
  // The saved prompt is the rendered caption, as a one-sample --samples file.
  const nlohmann::json samples = nlohmann::json::parse(slurp(saved));
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].at("prompt"), md);
  const std::string mtext = slurp(metrics);
  EXPECT_EQ(mtext.find(kKey), std::string::npos);
  const nlohmann::json m = nlohmann::json::parse(mtext);
  EXPECT_EQ(m.at("prompt_enhancement").at("attempts"), 1);
  EXPECT_EQ(m.at("prompt_enhancement").at("prompt_chars"), 22);
  EXPECT_GE(m.at("phase_ms").at("prompt_enhancement").get<double>(), 0.0);
  EXPECT_GT(m.at("prompt_chars").get<int>(), 22);
  // Replaying the saved prompt without the endpoint gives the same latents.
  const CliRun again = generate("--samples " + saved + " --save-latents " + dir_ + "/again.safetensors");
  ASSERT_EQ(again.rc, 0) << again.out;
  EXPECT_EQ(server_.seen().size(), 1u);
  EXPECT_TRUE(slurp(lat) == slurp(dir_ + "/again_sample_000.safetensors"));
  // The plain form holds the text verbatim.
  const CliRun plain = generate("--prompt 'A red fox in the snow.' --save-prompt " + dir_ + "/p.md --save-latents " +
                                dir_ + "/plain.safetensors");
  ASSERT_EQ(plain.rc, 0) << plain.out;
  EXPECT_EQ(slurp(dir_ + "/p.md"), "A red fox in the snow.");
}

TEST_F(GenerateEnhance, FaultsStopBeforeAnyOutput) {
  server_.script({{500, R"({"error": {"message": "model crashed"}})"}});
  const std::string lat = dir_ + "/lat.safetensors", saved = dir_ + "/p.md";
  const std::string outs = " --save-prompt " + saved + " --save-latents " + lat;
  const CliRun r = generate("--prompt fox --enhance-prompt --pe-retries 0 --pe-base-url " + server_.base_url() + outs);
  expect_one_line_error(r, "HTTP 500: model crashed");
  EXPECT_NE(r.out.find(server_.base_url() + "/chat/completions"), std::string::npos) << r.out;
  expect_one_line_error(generate("--prompt fox --enhance-prompt" + outs), "--pe-base-url");
  expect_one_line_error(generate("--text-features x.safetensors --enhance-prompt --pe-base-url " +
                                 server_.base_url() + outs),
                        "--text-features");
  EXPECT_FALSE(fs::exists(lat));
  EXPECT_FALSE(fs::exists(saved));
}

}  // namespace
}  // namespace magi2::test
