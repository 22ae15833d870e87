#include "model_files.h"

#include <filesystem>

#include "core/error.h"

namespace magi2::cli {

namespace fs = std::filesystem;

std::string find_transformer_dir(const std::string& path) {
  if (!fs::exists(path)) throw Error(str_cat("model path '", path, "' does not exist"));
  auto is_ckpt = [](const fs::path& p) {
    return fs::is_regular_file(p) ||
           fs::exists(p / "model.safetensors.index.json") || fs::exists(p / "model.safetensors");
  };
  if (fs::is_directory(path) && fs::exists(fs::path(path) / "preview") && is_ckpt(fs::path(path) / "preview"))
    return (fs::path(path) / "preview").string();
  if (is_ckpt(path)) return path;
  throw Error(str_cat("'", path,
                      "' is neither a MAGI-2 model folder (with preview/) nor a DiT checkpoint folder "
                      "(with model.safetensors.index.json)"));
}

Magi2Config load_config(const std::string& config_path) {
  return config_path.empty() ? Magi2Config::release() : Magi2Config::from_file(config_path);
}

Magi2Config config_for_model(const std::string& model_root, const std::string& config_path) {
  if (!config_path.empty()) return Magi2Config::from_file(config_path);
  if (!model_root.empty()) {
    const fs::path p = fs::path(model_root) / "config.json";
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return Magi2Config::from_file(p.string());
  }
  return Magi2Config::release();
}

LoadedDit load_dit(const std::string& config_path, const std::string& transformer_dir) {
  LoadedDit d{load_config(config_path), Checkpoint::open(transformer_dir), {}};
  d.weights = DitWeights::bind(d.ckpt, d.config.arch);
  return d;
}

}  // namespace magi2::cli
