// The `--weights` flag shared by generate, forward, bench and serve (docs/fp8.md).
#pragma once

#include <string>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace magi2::cli {

/// Adds `--weights auto|bf16|fp8-experts` (env MAGI2_WEIGHTS) writing to `dst`:
/// the routed expert format (ExpertWeights); other values are refused at parse time.
CLI::Option* add_weights_option(CLI::App* app, std::string& dst);

}  // namespace magi2::cli
