// `magi2 make-tiny`, the built-in tiny model (src/engine/tiny_model.*) and
// config_for_model (src/engine/model_files.*).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "golden/dit_fixture.h"
#include "util/testing.h"

#include "cache_env.h"
#include "engine/model_files.h"
#include "engine/tiny_model.h"

namespace magi2::test {
namespace {

namespace fs = std::filesystem;

// resolve_model with the cache folders from the environment, as the CLI does.
std::string resolve_model(const std::string& model) { return magi2::resolve_model(model, cli::cache_env()); }

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// Every file of a model folder, by relative path.
std::map<std::string, std::string> folder_bytes(const fs::path& root) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) m[fs::relative(e.path(), root).string()] = slurp(e.path());
  return m;
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

// Removes a test's temporary folder (12 MB per model written) when it ends.
struct Cleanup {
  std::string dir;
  explicit Cleanup(std::string d) : dir(std::move(d)) {}
  ~Cleanup() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// The built-in tiny model keeps every layer kind of the golden tiny config
// (dense mm layers, multi-head MoE layers, mHC, sinks) at narrower widths.
TEST(MakeTiny, TinyConfigHasTheGoldenLayerKinds) {
  const Magi2Config t = tiny_config();
  const Magi2Config g = Magi2Config::from_file(golden_dir() + "/dit_tiny/config.json");
  EXPECT_EQ(t.arch.num_layers, g.arch.num_layers);
  EXPECT_EQ(t.arch.hidden_size, 64);
  EXPECT_EQ(t.arch.head_dim, 32);
  EXPECT_EQ(t.arch.mm_layers, g.arch.mm_layers);
  EXPECT_EQ(t.arch.moe_layers, g.arch.moe_layers);
  EXPECT_EQ(t.arch.moe_num_heads, g.arch.moe_num_heads);
  EXPECT_EQ(t.arch.moe_num_experts, g.arch.moe_num_experts);
  EXPECT_EQ(t.arch.moe_top_k, g.arch.moe_top_k);
  EXPECT_EQ(t.arch.mhc_num_stream, g.arch.mhc_num_stream);
  EXPECT_EQ(t.arch.video_in_channels, g.arch.video_in_channels);
  EXPECT_EQ(t.arch.audio_in_channels, g.arch.audio_in_channels);
  EXPECT_EQ(t.arch.text_in_channels, 64);
  EXPECT_EQ(t.eval.shift, g.eval.shift);
  EXPECT_EQ(t.eval.num_inference_steps, 4);
  EXPECT_EQ(t.engine.seed, g.engine.seed);
  // The same tensor names as the golden checkpoint.
  const auto ts = dit_tensor_specs(t.arch);
  const auto gs = dit_tensor_specs(g.arch);
  ASSERT_EQ(ts.size(), gs.size());
  for (size_t i = 0; i < ts.size(); ++i) EXPECT_EQ(ts[i].name, gs[i].name);
}

TEST(MakeTiny, WritesOfficialLayoutThatBinds) {
  const Cleanup scratch(temp_dir("tiny_bind"));
  const fs::path dir = fs::path(scratch.dir) / "model";
  make_tiny_model(dir.string(), 0);
  ASSERT_TRUE(fs::is_regular_file(dir / "config.json"));
  ASSERT_TRUE(fs::is_regular_file(dir / "preview" / "model-00001-of-00002.safetensors"));
  ASSERT_TRUE(fs::is_regular_file(dir / "preview" / "model-00002-of-00002.safetensors"));
  // No temporary folder left beside it.
  for (const auto& e : fs::directory_iterator(dir.parent_path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();

  Checkpoint ckpt = Checkpoint::open((dir / "preview").string());
  EXPECT_EQ(ckpt.num_shards(), 2u);
  DitWeights w = DitWeights::bind(ckpt, tiny_config().arch);
  EXPECT_EQ(w.num_tensors, 131u);
  EXPECT_EQ(ckpt.names().size(), 131u);

  // Index: total_size = tensor bytes; every official name mapped to one of the two shards.
  const auto index = nlohmann::json::parse(slurp(dir / "preview" / "model.safetensors.index.json"));
  const TinyModelSize size = tiny_model_size();
  EXPECT_EQ(index["metadata"]["total_size"].get<size_t>(), size.num_bytes);
  EXPECT_EQ(index["weight_map"].size(), size.num_tensors);
  EXPECT_EQ(index["weight_map"]["pre_adapter.rope.bands"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["block.layers.3.mhc_norm.weight"], "model-00002-of-00002.safetensors");
  // Official dtypes as on disk.
  for (const auto& s : dit_tensor_specs(tiny_config().arch)) EXPECT_EQ(ckpt.entry(s.name).dtype, s.dtype) << s.name;

  // config.json in the official layout, read back by the normal parser.
  const auto cj = nlohmann::json::parse(slurp(dir / "config.json"));
  EXPECT_TRUE(cj.contains("engine_config") && cj.contains("arch_config") && cj.contains("evaluation_config"));
  const Magi2Config back = Magi2Config::from_file((dir / "config.json").string());
  EXPECT_EQ(back.arch.num_layers, 4);
  EXPECT_EQ(back.arch.moe_layers, tiny_config().arch.moe_layers);

  // rope.bands: the analytic default 10000^(-b/4) for head_dim 32, bit for bit the
  // even bands 10000^(-2b/8) of the golden checkpoint's official buffer (head_dim 64).
  const Tensor bands = w.rope_bands;
  const Tensor golden_bands = GoldenDit::get().weights.rope_bands;
  ASSERT_EQ(bands.numel(), 4);
  ASSERT_EQ(golden_bands.numel(), 8);
  for (int64_t b = 0; b < 4; ++b) {
    EXPECT_NEAR(bands.get_f32(b), std::pow(10000.0, -b / 4.0), 1e-7 * std::pow(10000.0, -b / 4.0));
    EXPECT_EQ(bands.get_f32(b), golden_bands.get_f32(2 * b)) << "band " << b;
  }
  // Recipe spot checks: sinks ~ N(3.5, 1), alphas in [0.3, 1.5], the two router biases differ.
  const Tensor& sinks = w.layers[0].sinks;
  double mean = 0;
  for (int64_t i = 0; i < sinks.numel(); ++i) mean += sinks.get_f32(i) / sinks.numel();
  EXPECT_GT(mean, 1.0);
  const float alpha = w.layers[2].mhc_attn.alpha_pre.get_f32(0);
  EXPECT_GE(alpha, 0.3f);
  EXPECT_LE(alpha, 1.5f);
  const Tensor eb = ckpt.tensor("block.layers.1.mlp.moe_mlp.router.expert_bias");
  const Tensor ebe = ckpt.tensor("block.layers.1.mlp.moe_mlp.router.expert_bias_ema");
  EXPECT_GT(compare(eb, ebe).max_abs, 0.0);
}

TEST(MakeTiny, SameSeedSameBytesOtherSeedOtherBytes) {
  const Cleanup scratch(temp_dir("tiny_seed"));
  const fs::path tmp = scratch.dir;
  make_tiny_model((tmp / "a").string(), 7);
  make_tiny_model((tmp / "b").string(), 7);
  make_tiny_model((tmp / "c").string(), 8);
  const auto a = folder_bytes(tmp / "a"), b = folder_bytes(tmp / "b"), c = folder_bytes(tmp / "c");
  // config, preview/ (index + 2 shards), text_encoder/ (config, weights, 2 tokenizer files),
  // turbo_vae/ (config, checkpoint), stable-audio-open-1.0/ (config, weights), vae/Wan2.2_VAE.pth,
  // refiner/ (index + 2 shards)
  ASSERT_EQ(a.size(), 16u);
  EXPECT_TRUE(a == b);
  for (const char* shard : {"preview/model-00001-of-00002.safetensors", "preview/model-00002-of-00002.safetensors",
                            "refiner/model-00001-of-00002.safetensors", "refiner/model-00002-of-00002.safetensors",
                            "text_encoder/model.safetensors", "turbo_vae/checkpoint.ckpt",
                            "stable-audio-open-1.0/model.safetensors", "vae/Wan2.2_VAE.pth"})
    EXPECT_NE(a.at(shard), c.at(shard)) << shard;
  for (const char* f : {"config.json", "text_encoder/config.json", "text_encoder/tokenizer.json",
                        "text_encoder/tokenizer_config.json"})
    EXPECT_EQ(a.at(f), c.at(f)) << f;
  // The index lists names and shards only: seed-independent.
  EXPECT_EQ(a.at("preview/model.safetensors.index.json"), c.at("preview/model.safetensors.index.json"));
}

TEST(MakeTiny, ForwardOnGoldenInputsIsFinite) {
  const Cleanup scratch(temp_dir("tiny_fwd"));
  const fs::path dir = fs::path(scratch.dir) / "model";
  make_tiny_model(dir.string(), 0);
  const Magi2Config cfg = config_for_model(dir.string(), "");
  Checkpoint ckpt = Checkpoint::open(find_transformer_dir(dir.string()));
  DitWeights w = DitWeights::bind(ckpt, cfg.arch);
  GoldenDit& g = GoldenDit::get();
  auto be = make_cpu_backend();
  Dit dit(cfg.arch, w, *be);
  Tensor out = dit.forward(g.inputs("t2v_"));
  ASSERT_EQ(out.shape(), (Shape{127, 64}));
  double ss = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    const float v = out.get_f32(i);
    ASSERT_TRUE(std::isfinite(v)) << "element " << i;
    ss += double(v) * v;
  }
  const double rms = std::sqrt(ss / out.numel());
  std::printf("  tiny random model t2v_ output rms %.4f\n", rms);
  EXPECT_GT(rms, 1e-3);
}

TEST(MakeTiny, CliWritesInspectsAndRefusesNonEmpty) {
  const Cleanup scratch(temp_dir("tiny_cli"));
  const fs::path tmp = scratch.dir;
  const std::string bin = magi2_binary();
  const fs::path dir = tmp / "m";
  std::string out;
  ASSERT_EQ(run_command(quote(bin) + " make-tiny " + quote(dir.string()) + " --seed 3", &out), 0) << out;
  EXPECT_NE(out.find("131 tensors"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  // The CLI writes what the library writes for the same seed; MAGI2_TINY_SEED mirrors --seed.
  make_tiny_model((tmp / "lib").string(), 3);
  EXPECT_TRUE(folder_bytes(dir) == folder_bytes(tmp / "lib"));
  ASSERT_EQ(run_command("MAGI2_TINY_SEED=3 " + quote(bin) + " make-tiny " + quote((tmp / "env").string()), &out), 0)
      << out;
  EXPECT_TRUE(folder_bytes(tmp / "env") == folder_bytes(tmp / "lib"));

  // inspect validates the folder against its own config.json.
  ASSERT_EQ(run_command(quote(bin) + " inspect " + quote(dir.string()) + " --config " +
                            quote((dir / "config.json").string()),
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("validation: OK: 131 DiT tensors"), std::string::npos) << out;

  // Into a non-empty folder: one-line error, non-zero exit, folder untouched.
  const auto before = folder_bytes(dir);
  EXPECT_NE(run_command(quote(bin) + " make-tiny " + quote(dir.string()) + " --seed 4", &out), 0);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_NE(out.find("not empty"), std::string::npos) << out;
  EXPECT_TRUE(folder_bytes(dir) == before);
  EXPECT_THROW(make_tiny_model(dir.string(), 4), Error);

  // An existing empty folder is fine.
  fs::create_directories(tmp / "empty");
  EXPECT_EQ(run_command(quote(bin) + " make-tiny " + quote((tmp / "empty").string()), &out), 0) << out;
  EXPECT_TRUE(fs::is_regular_file(tmp / "empty" / "config.json"));
}

TEST(MakeTiny, ResolveModelCreatesOnceAndReuses) {
  const Cleanup scratch(temp_dir("tiny_cache"));
  const fs::path cache = fs::path(scratch.dir) / "cache";
  ASSERT_EQ(::setenv("MAGI2_CACHE_DIR", cache.c_str(), 1), 0);
  EXPECT_EQ(resolve_model("/some/model/folder"), "/some/model/folder");

  // Concurrent first use: every caller gets the one complete folder.
  std::vector<std::string> got(4);
  std::vector<std::thread> th;
  for (int i = 0; i < 4; ++i) th.emplace_back([&, i] { got[i] = resolve_model("builtin:tiny"); });
  for (auto& t : th) t.join();
  const fs::path dir = cache / "tiny-v4";
  for (const auto& g : got) EXPECT_EQ(fs::path(g), dir);
  ASSERT_TRUE(fs::is_regular_file(dir / "preview" / "model.safetensors.index.json"));
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(cache)) ++entries, (void)e;
  EXPECT_EQ(entries, 1u);  // no temporary folders left

  // Second use reuses the folder (same bytes, same modification time).
  const auto mtime = fs::last_write_time(dir / "config.json");
  const auto bytes = folder_bytes(dir);
  EXPECT_EQ(fs::path(resolve_model("builtin:tiny")), dir);
  EXPECT_EQ(fs::last_write_time(dir / "config.json"), mtime);
  EXPECT_TRUE(folder_bytes(dir) == bytes);
  // Seed 0.
  make_tiny_model((cache.parent_path() / "seed0").string(), 0);
  EXPECT_TRUE(folder_bytes(cache.parent_path() / "seed0") == bytes);

  try {
    resolve_model("builtin:huge");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("builtin:tiny"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("builtin:huge"), std::string::npos) << e.what();
  }
  ::unsetenv("MAGI2_CACHE_DIR");
}

TEST(MakeTiny, ConfigForModel) {
  const Cleanup scratch(temp_dir("tiny_cfg"));
  const fs::path dir = fs::path(scratch.dir) / "model";
  make_tiny_model(dir.string(), 0);
  EXPECT_EQ(config_for_model(dir.string(), "").arch.num_layers, 4);          // MODEL_ROOT/config.json
  EXPECT_EQ(config_for_model((dir / "preview").string(), "").arch.num_layers, 40);  // none: release
  EXPECT_EQ(config_for_model("", "").arch.num_layers, 40);
  // An explicit --config wins over the folder's.
  const std::string golden_cfg = golden_dir() + "/dit_tiny/config.json";
  EXPECT_EQ(config_for_model(dir.string(), golden_cfg).source, golden_cfg);
  EXPECT_EQ(config_for_model(golden_dir() + "/dit_tiny", "").arch.hidden_size, 256);
  EXPECT_THROW(config_for_model(dir.string(), (dir / "nope.json").string()), Error);
}

}  // namespace
}  // namespace magi2::test
