// The kernel and routing choices that used to be read from the environment
// inside the library (MAGI2_ROUTER_BIAS_SOURCE, MAGI2_CUDA_ATTENTION) are
// engine options now, filled by the CLI flags and their MAGI2_* mirrors:
// the flag and the mirror take effect, and a bad value is one error line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "engine/params.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "util/cli.h"
#include "util/testing.h"

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

// A bad value in the env mirror of a fixed-list option names the variable and
// its value; a flag on the command line wins (CLI11 then ignores the variable)
// and a bad flag value names the flag; an empty variable counts as unset. Each
// error points at the subcommand's --help.
TEST(KernelOptions, BadEnvValuesNameTheVariable) {
  auto with_env = [](const std::string& env, const std::string& args) {
    test::CliRun r;
    r.rc = test::run_command(env + " " + test::magi2_binary() + " " + args, &r.out);
    return r;
  };
  test::expect_one_line_error(with_env("MAGI2_LINEAR_COMPUTE=fp9", "generate --prompt x -o /tmp/x.mp4"),
                              "MAGI2_LINEAR_COMPUTE='fp9' (the env mirror of --linear-compute): expected bf16 or fp8 "
                              "(see magi2 generate --help)");
  test::expect_one_line_error(with_env("MAGI2_ATTENTION_COMPUTE=fp4", "bench --device cpu --layers 1"),
                              "MAGI2_ATTENTION_COMPUTE='fp4' (the env mirror of --attention-compute)");
  test::expect_one_line_error(with_env("MAGI2_DEVICE=gpu", "encode-text --prompt x -o /tmp/x.safetensors"),
                              "MAGI2_DEVICE='gpu' (the env mirror of --device): expected auto, cuda or cpu");
  test::expect_one_line_error(with_env("MAGI2_LINEAR_COMPUTE=fp9", "generate --linear-compute fp7"),
                              "--linear-compute: fp7");
  test::expect_one_line_error(with_env("MAGI2_LINEAR_COMPUTE=fp9", "generate --linear-compute fp8"),
                              "nothing to generate");
  test::expect_one_line_error(with_env("MAGI2_LINEAR_COMPUTE=", "generate"), "nothing to generate");
  test::expect_one_line_error(magi2("refine --refiner-device gpu"), "(see magi2 refine --help)");
  test::expect_one_line_error(magi2("--bogus"), "(see magi2 --help)");
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
  EXPECT_TRUE(test::throws_with([&] { validate(o); }, {"--cuda-attention", "auto, cudnn or fp32", "fast"}));
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
  o = EngineOptions();
  o.attention_compute = "fp16";
  EXPECT_TRUE(test::throws_with([&] { validate(o); }, {"--attention-compute", "bf16 or fp8", "fp16"}));
}

// An FP8 compute flag (`flag fp8`, or `env`=fp8; docs/fp8.md) reaches the DiT
// on the CPU (its reference, any width): the flag and the env give the same
// latents, which differ from bf16's and stay finite; the run's summary line
// says `summary` and its metrics carry the mode under the flag's name; a bad
// value is one error naming the flag.
void expect_fp8_compute_flag(const std::string& flag, const std::string& env_name, const std::string& what,
                             const std::string& summary) {
  const std::string dir = test::temp_dir(what);
  const std::string common = "generate --model builtin:tiny --seconds 1 --width 96 --height 64 "
                             "--num-inference-steps 2 --no-decode --threads 1 --prompt 'A red fox.' --save-latents ";
  // builtin:tiny in a cache folder private to this test; `env`: NAME=value assignments.
  auto run = [&](const std::string& args, const std::string& env = "") {
    test::CliRun r;
    r.rc = test::run_command("MAGI2_CACHE_DIR=" + dir + "/cache " + env + " " + test::magi2_binary() + " " + args,
                             &r.out);
    return r;
  };
  const test::CliRun fp8 = run(common + dir + "/fp8.safetensors " + flag + " fp8 --metrics " + dir + "/m.json");
  ASSERT_EQ(fp8.rc, 0) << fp8.out;
  EXPECT_NE(fp8.out.find("seed 42, experts bf16, " + summary), std::string::npos) << fp8.out;
  const nlohmann::json m = nlohmann::json::parse(read_text_file(dir + "/m.json"));
  std::string key = flag.substr(2);  // --linear-compute -> linear_compute
  std::replace(key.begin(), key.end(), '-', '_');
  EXPECT_EQ(m.at(key), "fp8") << key;
  for (const char* k : {"weights", "fp8_compute", "attention_compute", "linear_compute"})
    EXPECT_TRUE(m.contains(k)) << k;
  EXPECT_EQ(m.at("weights"), "bf16");
  const test::CliRun env = run(common + dir + "/env.safetensors", env_name + "=fp8");
  ASSERT_EQ(env.rc, 0) << env.out;
  const test::CliRun bf16 = run(common + dir + "/bf16.safetensors");
  ASSERT_EQ(bf16.rc, 0) << bf16.out;
  const Tensor a = SafetensorsFile::open(dir + "/fp8.safetensors")->tensor("final_latent");
  const Tensor e = SafetensorsFile::open(dir + "/env.safetensors")->tensor("final_latent");
  const Tensor b = SafetensorsFile::open(dir + "/bf16.safetensors")->tensor("final_latent");
  EXPECT_EQ(test::differing_elements(a, e), 0);
  const test::Diff d = test::compare(a, b);
  std::printf("  tiny 2-step latents, %s fp8 vs bf16: rel-RMS %.3e\n", flag.c_str(), d.rel_rms);
  EXPECT_GT(d.rel_rms, 0.0);
  EXPECT_LT(d.rel_rms, 1.5);  // free-running CFG on the random tiny model amplifies differences (docs/parity.md)
  test::expect_one_line_error(run(common + dir + "/x.safetensors " + flag + " fp16"), flag);
}

TEST(KernelOptions, AttentionComputeFp8ReachesTheDitOnTheCpu) {
  expect_fp8_compute_flag("--attention-compute", "MAGI2_ATTENTION_COMPUTE", "attn-fp8", "attention fp8, linears bf16");
}

TEST(KernelOptions, LinearComputeFp8ReachesTheDitOnTheCpu) {
  expect_fp8_compute_flag("--linear-compute", "MAGI2_LINEAR_COMPUTE", "linear-fp8", "attention bf16, linears fp8");
}

}  // namespace
}  // namespace magi2
