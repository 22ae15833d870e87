// The kernel and routing choices that used to be read from the environment
// inside the library (MAGI2_ROUTER_BIAS_SOURCE, MAGI2_CUDA_ATTENTION) are
// engine options now, filled by the CLI flags and their MAGI2_* mirrors:
// the flag and the mirror take effect, and a bad value is one error line.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "engine/params.h"
#include "util/cli.h"

namespace magi2 {
namespace {

using test::magi2;

TEST(KernelOptions, RouterBiasFlagAndMirrorReachTheWeights) {
  const std::string ema = "routing bias: router.expert_bias_ema", main = "routing bias: router.expert_bias\n";
  const test::CliRun def = magi2("inspect builtin:tiny");
  ASSERT_EQ(def.rc, 0) << def.out;
  EXPECT_NE(def.out.find(ema), std::string::npos) << def.out;
  const test::CliRun flag = magi2("inspect builtin:tiny --router-bias main");
  ASSERT_EQ(flag.rc, 0) << flag.out;
  EXPECT_NE(flag.out.find(main), std::string::npos) << flag.out;
  std::string out;
  ASSERT_EQ(test::run_command("MAGI2_ROUTER_BIAS_SOURCE=main " + test::magi2_binary() + " inspect builtin:tiny", &out),
            0)
      << out;
  EXPECT_NE(out.find(main), std::string::npos) << out;
}

TEST(KernelOptions, BadValuesAreOneLineErrors) {
  test::expect_one_line_error(magi2("inspect builtin:tiny --router-bias mean"), "--router-bias");
  test::expect_one_line_error(magi2("bench --cuda-attention fast --device cpu --layers 1"), "--cuda-attention");
  test::expect_one_line_error(magi2("encode-text --prompt x -o /tmp/x.safetensors --text-encoder-device gpu"),
                              "--text-encoder-device");
  test::expect_one_line_error(magi2("generate --prompt x -o /tmp/x.wav --decoder-device gpu"), "--decoder-device");
  // The text encoder bench runs at the 27B widths: it refuses the CPU backend before making anything.
  test::expect_one_line_error(magi2("bench --stage text --device cpu --layers 1"), "needs the CUDA backend");
  test::expect_one_line_error(magi2("bench --fp8-compute w4a4 --device cpu --layers 1"), "--fp8-compute");
  test::expect_one_line_error(magi2("bench --offload sideways --device cpu --layers 1"), "--offload");
  test::expect_one_line_error(magi2("generate --prompt x -o /tmp/x.mp4 --offload sideways"), "--offload");
  // The env mirror is checked as strictly as the flag (a parse-time refusal, nothing loaded).
  std::string out;
  EXPECT_NE(test::run_command("MAGI2_OFFLOAD=sideways " + test::magi2_binary() + " generate --prompt x -o /tmp/x.mp4",
                              &out),
            0);
  EXPECT_NE(out.find("--offload"), std::string::npos) << out;
}

TEST(KernelOptions, OffloadIsDocumentedOnEveryFrontEnd) {
  for (const char* cmd : {"generate --help", "serve --help", "bench --help"}) {
    const test::CliRun r = magi2(cmd);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("--offload"), std::string::npos) << cmd;
    EXPECT_NE(r.out.find("MAGI2_OFFLOAD"), std::string::npos) << cmd;
  }
}

TEST(KernelOptions, EngineOptionsValidateTheChoices) {
  EngineOptions o;
  EXPECT_NO_THROW(validate(o));
  o.router_bias = "mean";
  EXPECT_TRUE(test::throws_with([&] { validate(o); }, {"--router-bias", "ema or main", "mean"}));
  o = EngineOptions();
  o.cuda.attention = "fast";
  EXPECT_TRUE(test::throws_with([&] { validate(o); }, {"--cuda-attention", "auto, cudnn, fp8 or fp32", "fast"}));
  o = EngineOptions();
  o.text_encoder_device = "gpu";
  EXPECT_TRUE(test::throws_with([&] { validate(o); }, {"--text-encoder-device", "auto or cpu", "gpu"}));
  o = EngineOptions();
  o.decoder_device = "gpu";
  EXPECT_TRUE(test::throws_with([&] { validate(o); }, {"--decoder-device", "auto or cpu", "gpu"}));
  o = EngineOptions();
  o.fp8_compute = "w4a4";
  EXPECT_TRUE(test::throws_with([&] { validate(o); }, {"--fp8-compute", "w8a16 or w8a8", "w4a4"}));
  o = EngineOptions();
  o.offload = "sideways";
  EXPECT_TRUE(test::throws_with([&] { validate(o); }, {"--offload", "none or layerwise", "sideways"}));
  o.offload = "layerwise";
  EXPECT_NO_THROW(validate(o));
}

}  // namespace
}  // namespace magi2
