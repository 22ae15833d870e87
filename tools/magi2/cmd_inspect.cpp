// `magi2 inspect DIR`: config, tensors and bytes per component, and whether the
// DiT checkpoint (and the text encoder, when present) binds to its config.
// Exit 0 only when it validates.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cache_env.h"
#include "commands.h"
#include "weights_option.h"
#include "core/error.h"
#include "core/finite.h"
#include "engine/model_files.h"
#include "io/safetensors.h"
#include "io/torch_zip.h"
#include "models/oobleck/decoder.h"
#include "models/qwen35/text_model.h"
#include "models/turbovae/decoder.h"
#include "models/wan22_vae/weights.h"
#include "engine/tiny_model.h"

namespace magi2::cli {

namespace {

namespace fs = std::filesystem;

struct InspectArgs {
  std::string dir;
  std::string config;
  std::string router_bias = "ema";
  bool check_values = false;
};

// The state dict a torch checkpoint's loader would take (the official rule:
// "ema_state_dict", else "state_dict", else the saved object).
std::string torch_dict_key(const std::string& path) {
  const std::vector<std::string> keys = torch_checkpoint_keys(path);
  for (const char* k : {"ema_state_dict", "state_dict"})
    if (std::find(keys.begin(), keys.end(), k) != keys.end()) return k;
  return "";
}

// --check-values: every tensor of every weight file under `root` (.safetensors,
// .ckpt, .pth) scanned for NaN/Inf. Prints each offending tensor; Error naming
// the first one when any is found.
void check_weight_values(const fs::path& root) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file() && (e.path().extension() == ".safetensors" || e.path().extension() == ".ckpt" ||
                                e.path().extension() == ".pth"))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  int64_t tensors = 0, bad = 0;
  std::string first;
  auto visit = [&](const std::string& file, const std::string& name, const Tensor& t) {
    ++tensors;
    const NonFiniteCount c = count_nonfinite(t);
    if (c.count == 0) return;
    const std::string line = str_cat(file, ": tensor '", name, "' ", shape_str(t.shape()), " has ", c.count,
                                     " non-finite values (", c.nan, " NaN; first at index ", c.first, ")");
    std::printf("check-values: %s\n", line.c_str());
    if (bad++ == 0) first = line;
  };
  for (const auto& f : files) {
    const std::string p = f.string();
    if (f.extension() == ".safetensors") {
      const auto st = SafetensorsFile::open(p);
      for (const auto& e : st->entries()) visit(p, e.name, st->tensor(e.name));
    } else {
      const TorchStateDict sd = load_torch_checkpoint(p, torch_dict_key(p));
      for (const auto& n : sd.names()) visit(p, n, sd.get(n));
    }
  }
  MAGI2_CHECK(bad == 0, "--check-values: ", bad, " of ", tensors, " tensors hold NaN/Inf; first: ", first);
  std::printf("check-values: OK: %lld tensors in %zu weight file(s), all finite\n", static_cast<long long>(tensors),
              files.size());
}

void print_component(const fs::path& p, const char* label) {
  if (!fs::exists(p)) {
    std::printf("  %-24s absent\n", label);
    return;
  }
  try {
    if (fs::is_directory(p) &&
        (fs::exists(p / "model.safetensors.index.json") || fs::exists(p / "model.safetensors"))) {
      Checkpoint c = Checkpoint::open(p.string());
      std::printf("  %-24s %zu tensors, %.3f GB in %zu shard(s)\n", label, c.names().size(),
                  static_cast<double>(c.total_bytes()) / 1e9, c.num_shards());
      return;
    }
    uintmax_t bytes = 0;
    size_t files = 0;
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) bytes += e.file_size(), ++files;
    } else {
      bytes = fs::file_size(p), files = 1;
    }
    std::printf("  %-24s %zu file(s), %.3f GB\n", label, files, static_cast<double>(bytes) / 1e9);
  } catch (const Error& e) {
    std::printf("  %-24s INVALID: %s\n", label, e.what());
  }
}

int run_inspect(const InspectArgs& a) {
  const std::string model = resolve_model(a.dir, cache_env());
  const std::string tdir = find_transformer_dir(model);
  Magi2Config cfg = config_for_model(model, a.config);
  std::printf("%s", cfg.summary().c_str());
  std::printf("components of %s:\n", model.c_str());
  const fs::path root(model);
  print_component(tdir, "preview (DiT)");
  if (fs::path(tdir) != root) {
    print_component(root / "text_encoder", "text_encoder");
    print_component(root / "turbo_vae", "turbo_vae");
    print_component(root / "vae", "vae");
    print_component(root / "stable-audio-open-1.0", "stable-audio-open-1.0");
  }
  Checkpoint ckpt = Checkpoint::open(tdir);
  DitWeights w = bind_dit(ckpt, cfg);
  w.router_bias_from_ema = router_bias_from_ema(a.router_bias, "--router-bias");
  std::printf("validation: OK: %zu DiT tensors (%.3f GB as bound) match the config; routing bias: %s\n",
              w.num_tensors, static_cast<double>(w.num_bytes) / 1e9,
              w.router_bias_from_ema ? "router.expert_bias_ema" : "router.expert_bias");
  // The text encoder, when present: its config and every tensor bind (no weight is converted).
  const fs::path te = root / "text_encoder";
  if (fs::path(tdir) != root && fs::is_regular_file(te / "config.json")) {
    const qwen35::TextConfig tc = qwen35::TextConfig::from_file((te / "config.json").string());
    Checkpoint tckpt = Checkpoint::open(te.string());
    const qwen35::TextWeights tw = qwen35::TextWeights::bind(tckpt, tc, DType::BF16, 0);
    int full = 0;
    for (bool f : tc.full_attention) full += f;
    std::printf("validation: OK: text encoder %d layers (%d linear / %d full attention), hidden %d, %zu tensors "
                "bind%s; features = output of layer %d\n",
                tc.num_hidden_layers, tc.num_hidden_layers - full, full, tc.hidden_size,
                qwen35::text_tensor_specs(tc).size(),
                tw.prefix.empty() ? "" : str_cat(" (prefix ", tw.prefix, ")").c_str(),
                tc.num_hidden_layers - 1 - qwen35::kOfficialSkipLayer);
    MAGI2_CHECK(tc.hidden_size == cfg.arch.text_in_channels, "text encoder hidden size ", tc.hidden_size,
                " does not match the DiT's text_in_channels ", cfg.arch.text_in_channels);
  }
  // The codecs, when present: config and strict binding, as generate loads them.
  if (fs::path(tdir) != root) {
    auto be = make_cpu_backend(0);
    if (fs::is_directory(root / "turbo_vae")) {
      const TurboVaeDecoder d = TurboVaeDecoder::load((root / "turbo_vae").string(), *be);
      std::printf("validation: OK: TurboVAE decoder binds (latent %d channels)\n", d.config().latent_channels);
    }
    if (fs::is_directory(root / "stable-audio-open-1.0")) {
      const OobleckDecoder d = OobleckDecoder::load((root / "stable-audio-open-1.0").string(), *be);
      std::printf("validation: OK: Stable Audio Open VAE decoder binds (latent %lld channels)\n",
                  static_cast<long long>(d.config().latent_dim));
    }
    if (fs::is_regular_file(root / "vae" / "Wan2.2_VAE.pth")) {
      Wan22EncoderWeights::load((root / "vae" / "Wan2.2_VAE.pth").string());
      std::printf("validation: OK: Wan2.2 VAE encoder binds\n");
    }
  }
  if (a.check_values) check_weight_values(fs::path(tdir) != root ? root : fs::path(tdir));
  return 0;
}

}  // namespace

Command inspect_command() {
  return make_command<InspectArgs>([](CLI::App& app, InspectArgs& a) {
    CLI::App* s = app.add_subcommand("inspect", "describe a model folder and validate every component it holds");
    s->add_option("model", a.dir, "model folder (with preview/), DiT checkpoint folder, or builtin:tiny")
        ->required()
        ->envname("MAGI2_MODEL");
    s->add_option("--config", a.config, "config in the official JSON layout (default: MODEL/config.json, else the built-in release config)")
        ->envname("MAGI2_CONFIG");
    s->add_flag("--check-values", a.check_values,
                "also read every weight and fail when any tensor holds NaN or Inf (reads all the bytes)")
        ->envname("MAGI2_CHECK_VALUES");
    add_router_bias_option(s, a.router_bias);
    return s;
  }, run_inspect);
}

}  // namespace magi2::cli
