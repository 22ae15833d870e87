#include "engine/model_files.h"

#include <filesystem>

#include "core/error.h"
#include "io/json_depth.h"
#include "io/mmap_file.h"

namespace magi2 {

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

Magi2Config config_for_model(const std::string& model_root, const std::string& config_path) {
  if (!config_path.empty()) return Magi2Config::from_file(config_path);
  if (!model_root.empty()) {
    const fs::path p = fs::path(model_root) / "config.json";
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return Magi2Config::from_file(p.string());
  }
  return Magi2Config::release();
}

RefinerConfig refiner_config_for_model(const std::string& model_root, const std::string& config_path) {
  std::string path = config_path;
  if (path.empty() && !model_root.empty()) {
    const fs::path p = fs::path(model_root) / "config.json";
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) path = p.string();
  }
  if (path.empty()) return RefinerConfig::release();
  const std::string text = read_text_file(path);
  const nlohmann::json j = parse_json_text(text, str_cat("config '", path, "'"));
  if (!j.is_object() || !j.contains("magi2_refiner_arch_config")) return RefinerConfig::release();
  return RefinerConfig::from_json_text(text, path);
}

std::string find_refiner_dir(const std::string& model_root) {
  const fs::path p = fs::path(model_root) / "refiner";
  MAGI2_CHECK(fs::exists(p / "model.safetensors.index.json") || fs::exists(p / "model.safetensors"), "model folder '",
              model_root, "' has no refiner/ checkpoint (the 1080p refiner): use --resolution 272p or 540p, or a "
              "complete official model folder");
  return p.string();
}

LoadedDit load_dit(const std::string& model, const std::string& transformer, const std::string& config_path,
                   ExpertWeights experts) {
  LoadedDit d;
  d.root = model;
  d.transformer_dir = find_transformer_dir(transformer.empty() ? d.root : transformer);
  d.config = config_for_model(d.root, config_path);
  d.ckpt = Checkpoint::open(d.transformer_dir);
  d.weights = bind_dit(d.ckpt, d.config, experts);
  return d;
}

DitWeights bind_dit(const Checkpoint& ckpt, const Magi2Config& config, ExpertWeights experts) {
  try {
    return DitWeights::bind(ckpt, config.arch, experts);
  } catch (const Error& e) {
    throw Error(str_cat(e.what(), " (config: ", config.source, "; pass the model's config with --config)"));
  }
}

void check_output_path(const std::string& path, const std::string& flag) {
  if (path.empty()) return;
  const fs::path dir = fs::absolute(path).parent_path();
  const std::string why = folder_problem(dir.string());
  MAGI2_CHECK(why.empty(), flag, " ", path, ": folder '", dir.string(), "' ", why);
  MAGI2_CHECK(!fs::is_directory(path), flag, " ", path, ": is a folder, expected a file name");
}

}  // namespace magi2
