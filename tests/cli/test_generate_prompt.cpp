// The prompt side of `magi2 generate`: a prompt -> latents run on builtin:tiny
// (MODEL/text_encoder), its one-line errors, and the official --samples batch.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "io/safetensors.h"
#include "util/cli.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

namespace fs = std::filesystem;

std::string write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// builtin:tiny (with its text_encoder/) in a cache folder private to this test run.
std::string tiny_env() {
  static const std::string env = "MAGI2_CACHE_DIR=" + temp_dir("encode_text_cache") + " ";
  return env;
}

TEST(GenerateFromPrompt, PromptToLatentsOnBuiltinTiny) {
  const std::string env = tiny_env();
  const std::string dir = temp_dir("gen_prompt");
  const std::string common =
      " generate --model builtin:tiny --seconds 1 --width 96 --height 64 "
      "--num-inference-steps 2 --no-decode --negative-prompt 'blurry, low quality' --threads 1 ";
  const CliRun r = CliRun{run_command(env + magi2_binary() + common +
                                          "--prompt 'A red fox runs through the snow.' "
                                          "--save-latents " +
                                          dir + "/lat.safetensors",
                                      nullptr),
                          ""};
  ASSERT_EQ(r.rc, 0);
  auto f = SafetensorsFile::open(dir + "/lat.safetensors");
  EXPECT_EQ(f->tensor("final_latent").shape(), (Shape{1, 48, 4, 4, 6}));
  // encode-text's file fed back as --text-features gives the same bytes.
  ASSERT_EQ(
      run_command(env + magi2_binary() +
                      " encode-text --model builtin:tiny --threads 1 --prompt "
                      "'A red fox runs through the snow.' --negative --negative-prompt 'blurry, low quality' -o " +
                      dir + "/text.safetensors",
                  nullptr),
      0);
  const std::string from_features =
      common + "--text-features " + dir + "/text.safetensors --save-latents " + dir + "/lat2.safetensors";
  ASSERT_EQ(run_command(env + magi2_binary() + from_features, nullptr), 0);
  std::ifstream a(dir + "/lat.safetensors", std::ios::binary), b(dir + "/lat2.safetensors", std::ios::binary);
  EXPECT_TRUE(std::string(std::istreambuf_iterator<char>(a), {}) == std::string(std::istreambuf_iterator<char>(b), {}));
  // Errors of the prompt path: one line each, before the denoising loop.
  CliRun e;
  e.rc = run_command(env + magi2_binary() + common + "--prompt '' --save-latents " + dir + "/x.safetensors", &e.out);
  expect_one_line_error(e, "--prompt: the prompt is empty");
  // Whitespace only is no prompt either: refused by the engine's request
  // check before any model work (the missing text encoder is never reached).
  e.rc = run_command(env + magi2_binary() + common +
                         "--prompt ' \t\n ' --text-encoder /nonexistent/te --save-latents " + dir + "/x.safetensors",
                     &e.out);
  expect_one_line_error(e, "--prompt: the prompt is only whitespace");
  EXPECT_EQ(e.rc, 1);
  const std::string blank = write_file(dir + "/blank.txt", " \n\t\xE3\x80\x80\n");  // stripped as Python does
  e.rc = run_command(env + magi2_binary() + common + "--prompt-file " + blank + " --save-latents " + dir +
                         "/x.safetensors",
                     &e.out);
  expect_one_line_error(e, "--prompt-file " + blank + ": the prompt is only whitespace");
  e.rc = run_command(env + magi2_binary() + common + "--prompt a --text-features x.safetensors --save-latents " + dir +
                         "/x.safetensors",
                     &e.out);
  expect_one_line_error(e, "only one of");
  e.rc = run_command(env + magi2_binary() + common + "--prompt a --text-encoder /nonexistent/te --save-latents " + dir +
                         "/x.safetensors",
                     &e.out);
  expect_one_line_error(e, "/nonexistent/te");
  EXPECT_FALSE(fs::exists(dir + "/x.safetensors"));
}

TEST(GenerateFromPrompt, SamplesBatch) {
  const std::string env = tiny_env();
  const std::string dir = temp_dir("gen_samples");
  write_file(dir + "/p1.txt", "  A cat on a roof at night.\n");
  const std::string samples =
      write_file(dir + "/samples.json", R"([{"prompt": "A dog barks."}, {"prompt_file": "p1.txt", "image": null}])");
  const std::string common =
      " generate --model builtin:tiny --seconds 0.4 --width 64 --height 32 "
      "--num-inference-steps 1 --no-decode --negative-prompt blurry --threads 1 ";
  CliRun r;
  r.rc = run_command(env + magi2_binary() + common + "--samples " + samples + " --save-latents " + dir +
                         "/lat.safetensors --metrics " + dir + "/m.json",
                     &r.out);
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* f :
       {"lat_sample_000.safetensors", "lat_sample_001.safetensors", "m_sample_000.json", "m_sample_001.json"})
    EXPECT_TRUE(fs::exists(dir + "/" + f)) << f;
  std::ifstream m1(dir + "/m_sample_001.json");
  EXPECT_EQ(nlohmann::json::parse(m1).at("seed"), 43);  // official: seed + sample index
  // Bad batches name the file and the sample.
  const std::string out = " --save-latents " + dir + "/x.safetensors";
  r.rc = run_command(env + magi2_binary() + common + "--samples " +
                         write_file(dir + "/img.json", R"([{"prompt": "a"}, {"prompt": "b", "image": "x.png"}])") + out,
                     &r.out);
  expect_one_line_error(r, "sample 1");
  r.rc = run_command(
      env + magi2_binary() + common + "--samples " + write_file(dir + "/key.json", R"([{"promt": "a"}])") + out,
      &r.out);
  expect_one_line_error(r, "unknown key 'promt'");
  r.rc = run_command(env + magi2_binary() + common + "--samples " + write_file(dir + "/bad.json", "[{") + out, &r.out);
  expect_one_line_error(r, "not valid JSON");
  r.rc = run_command(
      env + magi2_binary() + common + "--samples " + write_file(dir + "/empty.json", R"([{"prompt": ""}])") + out,
      &r.out);
  expect_one_line_error(r, "sample 0: the prompt is empty");
  // One blank sample fails the whole batch up front, naming it.
  r.rc = run_command(env + magi2_binary() + common + "--samples " +
                         write_file(dir + "/blank.json", R"([{"prompt": "a"}, {"prompt": " \n\t "}])") + out,
                     &r.out);
  expect_one_line_error(r, "sample 1: the prompt is only whitespace");
  EXPECT_FALSE(fs::exists(dir + "/x_sample_000.safetensors"));
}

}  // namespace
}  // namespace magi2::test
