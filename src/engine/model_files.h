// Locating the official model folder's components and loading the DiT for the
// CLI commands (layout: spec magi2-pipeline.md §9).
#pragma once

#include <string>

#include "io/checkpoint.h"
#include "models/magi2_dit/config.h"
#include "models/magi2_dit/weights.h"
#include "models/magi2_refiner/config.h"

namespace magi2 {

/// The DiT checkpoint folder of `path`: `path/preview` when `path` is the
/// official model root, else `path` itself when it holds a DiT index or a
/// model.safetensors. Error naming the path otherwise.
std::string find_transformer_dir(const std::string& path);

/// The config for a model folder: `config_path` when given (explicit --config
/// wins), else `model_root`/config.json when that file exists (the layout of
/// `magi2 make-tiny` and of shared/golden/dit_tiny), else the built-in release
/// config. `model_root` may be empty or a DiT checkpoint folder (no
/// config.json: release config). Errors: those of Magi2Config::from_file
/// (unreadable file, bad JSON, bad key), naming the file.
Magi2Config config_for_model(const std::string& model_root, const std::string& config_path);

/// The refiner config of a model folder, chosen like config_for_model(): the
/// same file when it has a magi2_refiner_arch_config section (the official
/// configs/magi2_refiner.json layout, and make-tiny's config.json), else the
/// built-in release values. Errors: those of RefinerConfig::from_json_text.
RefinerConfig refiner_config_for_model(const std::string& model_root, const std::string& config_path);

/// The refiner checkpoint folder of a model folder: `model_root`/refiner.
/// Error naming the folder when it is missing.
std::string find_refiner_dir(const std::string& model_root);

/// A loaded DiT: where it came from, config, open checkpoint and bound weights.
struct LoadedDit {
  std::string root;             ///< the model folder
  std::string transformer_dir;  ///< the DiT checkpoint folder used
  Magi2Config config;
  Checkpoint ckpt;
  DitWeights weights;
};

/// DitWeights::bind, with the config's source added to a mismatch Error
/// (the usual cause is a missing --config).
DitWeights bind_dit(const Checkpoint& ckpt, const Magi2Config& config, ExpertWeights experts = ExpertWeights::Auto);

/// For the model folder `model` (builtin:tiny already resolved by
/// resolve_model()), finds its DiT checkpoint
/// (`transformer` overrides MODEL/preview), picks the config as
/// config_for_model() does, and binds strictly. A mismatch Error also names the
/// config used, since the usual cause is a missing --config.
/// `experts` chooses the routed expert format (DitWeights::bind).
LoadedDit load_dit(const std::string& model, const std::string& transformer, const std::string& config_path,
                   ExpertWeights experts = ExpertWeights::Auto);

/// Checks before any work that `path` can receive an output file: its folder
/// exists and it is not itself a folder. Error naming `flag` and the path.
void check_output_path(const std::string& path, const std::string& flag);

}  // namespace magi2
