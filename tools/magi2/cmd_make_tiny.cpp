// `magi2 make-tiny DIR [--seed N]`: writes the built-in tiny random-weight
// model (tiny_model.h) as an official model folder, for smoke tests without
// the release checkpoint.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "engine/tiny_model.h"

namespace magi2::cli {

namespace {

struct MakeTinyArgs {
  std::string dir;
  uint64_t seed = 0;
};

int run_make_tiny(const MakeTinyArgs& a) {
  make_tiny_model(a.dir, a.seed);
  const TinyModelSize s = tiny_model_size();
  std::printf("make-tiny: DiT %zu tensors, %zu bytes + text_encoder/, turbo_vae/, stable-audio-open-1.0/, vae/ "
              "(seed %llu) -> %s\n", s.num_tensors,
              s.num_bytes, static_cast<unsigned long long>(a.seed), a.dir.c_str());
  return 0;
}

}  // namespace

Command make_tiny_command() {
  return make_command<MakeTinyArgs>([](CLI::App& app, MakeTinyArgs& a) {
    CLI::App* s = app.add_subcommand(
        "make-tiny",
        "write a tiny random-weight model folder in the official layout for testing: the tiny golden DiT, a tiny "
        "Qwen3.5 text encoder (text_encoder/), TurboVAE (turbo_vae/), the Oobleck audio VAE "
        "(stable-audio-open-1.0/) and the Wan2.2 image encoder (vae/); seed 0 gives builtin:tiny's folder");
    s->add_option("dir", a.dir, "output model folder (must not exist, or be empty)")->required();
    // NonNegativeNumber: CLI11 would wrap "-1" into 2^64 - 1.
    s->add_option("--seed", a.seed, "weight seed in [0, 2^64) (same seed: identical files)")
        ->check(CLI::NonNegativeNumber)
        ->envname("MAGI2_TINY_SEED");
    return s;
  }, run_make_tiny);
}

}  // namespace magi2::cli
