// Locating the official model folder's components and loading the DiT for the
// CLI commands (layout: spec magi2-pipeline.md §9).
#pragma once

#include <string>

#include "io/checkpoint.h"
#include "models/magi2_dit/config.h"
#include "models/magi2_dit/weights.h"

namespace magi2::cli {

/// The DiT checkpoint folder of `path`: `path/preview` when `path` is the
/// official model root, else `path` itself when it holds a DiT index or a
/// model.safetensors. Error naming the path otherwise.
std::string find_transformer_dir(const std::string& path);

/// The config to use: `config_path` when given (official JSON layout), else
/// the built-in release config.
Magi2Config load_config(const std::string& config_path);

/// A loaded DiT: config, open checkpoint and bound weights.
struct LoadedDit {
  Magi2Config config;
  Checkpoint ckpt;
  DitWeights weights;
};

/// Opens and strictly binds the DiT; Error naming the folder on any mismatch.
LoadedDit load_dit(const std::string& config_path, const std::string& transformer_dir);

}  // namespace magi2::cli
