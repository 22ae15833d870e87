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

/// The config for a model folder: `config_path` when given (explicit --config
/// wins), else `model_root`/config.json when that file exists (the layout of
/// `magi2 make-tiny` and of shared/golden/dit_tiny), else the built-in release
/// config. `model_root` may be empty or a DiT checkpoint folder (no
/// config.json: release config). Errors: those of Magi2Config::from_file
/// (unreadable file, bad JSON, bad key), naming the file.
Magi2Config config_for_model(const std::string& model_root, const std::string& config_path);

/// A loaded DiT: config, open checkpoint and bound weights.
struct LoadedDit {
  Magi2Config config;
  Checkpoint ckpt;
  DitWeights weights;
};

/// Opens and strictly binds the DiT; Error naming the folder on any mismatch.
LoadedDit load_dit(const std::string& config_path, const std::string& transformer_dir);

}  // namespace magi2::cli
