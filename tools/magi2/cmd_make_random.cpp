// `magi2 make-random DIR --layers N [--text-layers M] [--refiner-layers R]
// [--seed S] [--fp8-experts]`: a random-weight model folder at the release
// widths (engine/random_model.h), for running `magi2 generate` through the
// release shapes without the 307 GB checkpoint.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "core/error.h"
#include "engine/random_model.h"

namespace magi2::cli {

namespace {

struct MakeRandomArgs {
  std::string dir;
  RandomModelOptions o;
  uint64_t seed = 0;
};

int run_make_random(const MakeRandomArgs& a) {
  const RandomModelLayout layout = random_model_layout(a.o);  // range errors before anything is written
  std::string kinds;
  for (size_t l = 0; l < layout.release_layers.size(); ++l)
    kinds += str_cat(l ? ", " : "", layout.release_layers[l], layout.dit.is_moe_layer(static_cast<int>(l)) ? " MoE" : " mm");
  std::printf("make-random: DiT %d layers at the release widths (release layers %s), text encoder %d layers, "
              "refiner %d layers, routed experts %s, seed %llu -> %s\n",
              layout.dit.num_layers, kinds.c_str(), layout.text.num_hidden_layers, layout.refiner_layers,
              layout.fp8_experts ? "fp8" : "bf16", static_cast<unsigned long long>(a.seed), a.dir.c_str());
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  const RandomModelSummary s = make_random_model(a.dir, layout, a.seed, [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("make-random: %llu bytes (%.2f GB) in %.1f s -> %s\n", static_cast<unsigned long long>(s.folder_bytes),
              s.folder_bytes / 1e9, secs, a.dir.c_str());
  return 0;
}

}  // namespace

Command make_random_command() {
  return make_command<MakeRandomArgs>([](CLI::App& app, MakeRandomArgs& a) {
    CLI::App* s = app.add_subcommand(
        "make-random", "write a random-weight model folder at the release widths (layer counts cut) for testing "
                       "the release shapes without the checkpoint");
    s->add_option("dir", a.dir, "output model folder (must not exist, or be empty)")->required();
    s->add_option("--layers", a.o.layers, "DiT layers, 1..40 (1: one MoE layer; 2: mm + MoE; 40: the release)")
        ->envname("MAGI2_RANDOM_LAYERS")
        ->capture_default_str();
    s->add_option("--text-layers", a.o.text_layers, "Qwen3.5 text encoder layers, 3..64 (the features use M - 2)")
        ->envname("MAGI2_RANDOM_TEXT_LAYERS")
        ->capture_default_str();
    s->add_option("--refiner-layers", a.o.refiner_layers, "1080p refiner layers, 0..30 (0: no refiner/ folder)")
        ->envname("MAGI2_RANDOM_REFINER_LAYERS")
        ->capture_default_str();
    // NonNegativeNumber: CLI11 would wrap "-1" into 2^64 - 1.
    s->add_option("--seed", a.seed, "weight seed in [0, 2^64) (same seed: identical files)")
        ->check(CLI::NonNegativeNumber)
        ->envname("MAGI2_RANDOM_SEED");
    s->add_flag("--fp8-experts", a.o.fp8_experts,
                "routed experts in F8_E4M3 with 128x128 block scales (the layout `magi2 quantize` writes)")
        ->envname("MAGI2_RANDOM_FP8_EXPERTS");
    return s;
  }, run_make_random);
}

}  // namespace magi2::cli
