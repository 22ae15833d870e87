#include "models/oobleck/tiny.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numbers>
#include <system_error>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/seeded_random.h"
#include "core/seeded_tensor.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "models/oobleck/weights.h"

namespace magi2 {

namespace {

bool ends_with(const std::string& s, const char* tail) { return s.ends_with(tail); }

Tensor make_tensor(const std::string& name, const Shape& shape, uint64_t seed) {
  const uint64_t key = fnv1a(name) ^ seed;
  return seeded_tensor(shape, DType::F32, [&](uint64_t u) {
    if (ends_with(name, "weight_g")) return 0.5 + 0.5 * unit_uniform(key, u);
    if (ends_with(name, "bias")) return 0.02 * normal_sample(key, u, 0.0, 1.0);
    if (ends_with(name, "alpha")) return 0.5 * normal_sample(key, u, 0.0, 1.0);
    if (ends_with(name, "beta")) return 0.5 + 0.3 * normal_sample(key, u, 0.0, 1.0);
    return normal_sample(key, u, 0.0, 1.0);  // weight_v and the placeholder
  });
}

}  // namespace

std::string tiny_sao_vae_config_json(int64_t channels) {
  using oj = nlohmann::ordered_json;
  const oj mults = {1, 2, 4, 8, 16}, strides = {2, 4, 4, 8, 8};
  oj enc = {{"type", "oobleck"},
            {"requires_grad", false},
            {"config",
             {{"in_channels", 2}, {"channels", channels}, {"c_mults", mults}, {"strides", strides},
              {"latent_dim", 128}, {"use_snake", true}}}};
  oj dec = {{"type", "oobleck"},
            {"config",
             {{"out_channels", 2}, {"channels", channels}, {"c_mults", mults}, {"strides", strides},
              {"latent_dim", 64}, {"use_snake", true}, {"final_tanh", false}}}};
  oj pre = {{"type", "autoencoder"},
            {"iterate_batch", true},
            {"config",
             {{"encoder", enc}, {"decoder", dec}, {"bottleneck", {{"type", "vae"}}}, {"latent_dim", 64},
              {"downsampling_ratio", 2048}, {"io_channels", 2}}}};
  oj root = {{"model_type", "diffusion_cond"}, {"sample_size", 2097152}, {"sample_rate", 44100},
             {"audio_channels", 2}, {"model", {{"pretransform", pre}}}};
  return root.dump(2) + "\n";
}

std::vector<SaoTensorSpec> tiny_sao_vae_tensor_specs(int64_t channels) {
  const std::string text = tiny_sao_vae_config_json(channels);
  std::vector<SaoTensorSpec> specs = sao_vae_tensor_specs(SaoVaeConfig::from_json_text(text, "tiny"));
  specs.push_back({"model.placeholder_not_vae", {4}});
  return specs;
}

void write_tiny_sao_vae(const std::string& dir, uint64_t seed, int64_t channels) {
  MAGI2_CHECK(channels >= 1, "tiny audio VAE: channels must be >= 1, got ", channels);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MAGI2_CHECK(!ec && std::filesystem::is_directory(dir), "cannot create folder '", dir, "'");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const SaoTensorSpec& s : tiny_sao_vae_tensor_specs(channels))
    tensors.emplace_back(s.name, make_tensor(s.name, s.shape, seed));
  write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(dir + "/model_config.json", tiny_sao_vae_config_json(channels));
}

}  // namespace magi2
