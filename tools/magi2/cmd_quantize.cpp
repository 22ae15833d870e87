// `magi2 quantize MODEL OUT`: writes MODEL with FP8 routed experts (e4m3,
// 128x128 block scales `<name>_scale_inv`) as a new model folder in the
// official layout, which `generate --model OUT` loads directly (docs/fp8.md).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "cache_env.h"
#include "commands.h"
#include "engine/quantize_model.h"
#include "engine/tiny_model.h"

namespace magi2::cli {

namespace {

struct QuantizeArgs {
  std::string model, out, config;
};

int run_quantize(const QuantizeArgs& a) {
  const QuantizeSummary s = quantize_model(resolve_model(a.model, cache_env()), a.out, a.config);
  std::printf("quantize: %zu routed expert banks -> F8_E4M3 + 128x128 block scales; DiT %zu tensors, "
              "%.3f GB -> %.3f GB; %zu other files carried over; %s -> %s\n",
              s.quantized, s.tensors, s.bytes_in / 1e9, s.bytes_out / 1e9, s.files_copied, s.transformer_dir.c_str(),
              a.out.c_str());
  return 0;
}

}  // namespace

Command quantize_command() {
  return make_command<QuantizeArgs>([](CLI::App& app, QuantizeArgs& a) {
    CLI::App* s = app.add_subcommand(
        "quantize", "write a model folder with FP8 routed experts (e4m3, 128x128 block scales) for generate --model");
    s->add_option("model", a.model, "model folder (official layout with preview/), DiT checkpoint folder, or "
                                        "builtin:tiny")
        ->required()
        ->envname("MAGI2_QUANTIZE_MODEL");
    s->add_option("out", a.out, "new model folder (must not exist; written atomically)")
        ->required()
        ->envname("MAGI2_QUANTIZE_OUT");
    s->add_option("--config", a.config, "config in the official JSON layout (default: MODEL/config.json or the "
                                            "built-in release config)")
        ->envname("MAGI2_CONFIG");
    return s;
  }, run_quantize);
}

}  // namespace magi2::cli
