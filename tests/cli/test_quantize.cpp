// `magi2 quantize` and FP8 routed experts end to end on the built-in tiny
// model (docs/fp8.md): the quantised folder keeps the official layout, names
// and files; `generate` loads it directly and gives the same latents as
// `--weights fp8-experts` on the bf16 model (quantised at load); the errors
// are one line each and write nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/magi2_dit/weights.h"
#include "util/cli.h"

namespace magi2::test {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// builtin:tiny in a cache folder private to this test run.
std::string tiny_env() {
  static const std::string env = "MAGI2_CACHE_DIR=" + temp_dir("quantize_cache") + " ";
  return env;
}

// `magi2 ARGS` with the private cache and `env` ("NAME=value ..." assignments) prepended.
CliRun magi2_env(const std::string& args, const std::string& env = "") {
  CliRun r;
  r.rc = run_command(tiny_env() + env + " " + magi2_binary() + " " + args, &r.out);
  return r;
}

TEST(Quantize, TinyModelFolderThenFp8Generate) {
  const std::string dir = temp_dir("quantize");
  const std::string src = dir + "/tiny", q = dir + "/tiny-fp8";
  ASSERT_EQ(magi2_env("make-tiny " + src).rc, 0);
  const CliRun r = magi2_env("quantize " + src + " " + q);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("F8_E4M3"), std::string::npos) << r.out;
  for (const auto& e : fs::directory_iterator(dir))  // no temporary folder left behind
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  // Every file but the DiT shards and index is carried over byte for byte.
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), src);
    ASSERT_TRUE(fs::exists(fs::path(q) / rel)) << rel;
    if (rel.parent_path() == "preview") continue;
    EXPECT_EQ(slurp(e.path()), slurp(fs::path(q) / rel)) << rel;
    ++files;
  }
  EXPECT_GT(files, 4u);
  // The DiT: same names and bytes except the routed banks, which are F8 with scales beside them.
  const Checkpoint a = Checkpoint::open(src + "/preview"), b = Checkpoint::open(q + "/preview");
  EXPECT_EQ(a.num_shards(), b.num_shards());
  size_t banks = 0;
  for (const std::string& n : a.names()) {
    ASSERT_TRUE(b.contains(n)) << n;
    if (is_routed_expert_weight(n)) {
      ++banks;
      EXPECT_EQ(b.entry(n).dtype, DType::F8E4M3) << n;
      ASSERT_TRUE(b.contains(n + "_scale_inv")) << n;
      EXPECT_EQ(b.entry(n + "_scale_inv").dtype, DType::F32);
    } else {
      const Tensor x = a.tensor(n), y = b.tensor(n);
      EXPECT_EQ(x.dtype(), y.dtype()) << n;
      EXPECT_EQ(std::string(static_cast<const char*>(x.data()), x.nbytes()),
                std::string(static_cast<const char*>(y.data()), y.nbytes()))
          << n;
    }
  }
  EXPECT_EQ(banks, 6u);
  EXPECT_EQ(b.names().size(), a.names().size() + banks);
  const auto index = nlohmann::json::parse(slurp(q + "/preview/model.safetensors.index.json"));
  EXPECT_EQ(index["weight_map"].size(), b.names().size());
  EXPECT_EQ(index["metadata"]["total_size"].get<size_t>(), b.total_bytes());

  // generate: the FP8 folder directly == the bf16 folder quantised at load; bf16 differs slightly.
  const std::string common = " --seconds 1 --width 96 --height 64 --num-inference-steps 2 --no-decode "
                             "--threads 1 --prompt 'A red fox.' --save-latents ";
  ASSERT_EQ(magi2_env("generate --model " + q + common + dir + "/q.safetensors").rc, 0);
  ASSERT_EQ(magi2_env("generate --model " + src + " --weights fp8-experts" + common + dir + "/l.safetensors").rc, 0);
  ASSERT_EQ(magi2_env("generate --model " + src + common + dir + "/b.safetensors").rc, 0);
  EXPECT_EQ(slurp(dir + "/q.safetensors"), slurp(dir + "/l.safetensors"));
  const auto fq = SafetensorsFile::open(dir + "/q.safetensors"), fb = SafetensorsFile::open(dir + "/b.safetensors");
  const Tensor lq = fq->tensor("final_latent"), lb = fb->tensor("final_latent");
  double se = 0, sr = 0;
  for (int64_t i = 0; i < lb.numel(); ++i) {
    const double d = lq.get_f32(i) - lb.get_f32(i);
    se += d * d;
    sr += static_cast<double>(lb.get_f32(i)) * lb.get_f32(i);
  }
  const double rel = std::sqrt(se / sr);
  std::printf("  tiny 2-step latents, FP8 experts vs bf16: rel-RMS %.3e\n", rel);
  // Different (the weights are), finite; free-running CFG on the random tiny model
  // amplifies any difference several-fold per step (docs/parity.md), so no tighter bound here.
  EXPECT_GT(rel, 0.0);
  EXPECT_LT(rel, 1.5);
  // --weights bf16 on the FP8 folder dequantises: the same latents as bf16 banks bf16(q * scale).
  ASSERT_EQ(magi2_env("generate --model " + q + " --weights bf16" + common + dir + "/qb.safetensors").rc, 0);
  EXPECT_EQ(slurp(dir + "/q.safetensors"), slurp(dir + "/qb.safetensors"));
  // --fp8-compute w8a8 (docs/fp8.md): e4m3 activations too; other latents, the same through the env mirror.
  ASSERT_EQ(magi2_env("generate --model " + q + " --fp8-compute w8a8" + common + dir + "/w8.safetensors").rc, 0);
  ASSERT_EQ(magi2_env("generate --model " + q + common + dir + "/w8e.safetensors", "MAGI2_FP8_COMPUTE=w8a8").rc, 0);
  EXPECT_NE(slurp(dir + "/q.safetensors"), slurp(dir + "/w8.safetensors"));
  EXPECT_EQ(slurp(dir + "/w8.safetensors"), slurp(dir + "/w8e.safetensors"));

  // Errors: one line each, nothing written.
  expect_one_line_error(magi2_env("quantize " + src + " " + q), "already exists");
  expect_one_line_error(magi2_env("quantize " + q + " " + dir + "/again"), "already FP8");
  EXPECT_FALSE(fs::exists(dir + "/again"));
  expect_one_line_error(magi2_env("quantize " + src + " " + src + "/inside"), "must not be inside");
  expect_one_line_error(magi2_env("generate --model " + src + " --weights fp4" + common + dir + "/x.safetensors"),
                        "--weights");
  expect_one_line_error(magi2_env("generate --model " + q + " --fp8-compute w4a8" + common + dir + "/x.safetensors"),
                        "--fp8-compute");
}

}  // namespace
}  // namespace magi2::test
