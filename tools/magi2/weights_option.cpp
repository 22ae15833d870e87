#include "weights_option.h"

#include <CLI/CLI.hpp>

namespace magi2::cli {

CLI::Option* add_weights_option(CLI::App* app, std::string& dst) {
  return app
      ->add_option("--weights", dst,
                   "routed expert weights: auto (as the checkpoint stores them), bf16, or fp8-experts (e4m3 with "
                   "128x128 block scales, quantised at load from bf16; W8A16)")
      ->check(CLI::IsMember({"auto", "bf16", "fp8-experts"}))
      ->envname("MAGI2_WEIGHTS")
      ->capture_default_str();
}

}  // namespace magi2::cli
