// Tiny random TurboVAE folder (see tiny.h).
#include "models/turbovae/tiny.h"

#include <cmath>
#include <filesystem>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/seeded_random.h"
#include "core/seeded_tensor.h"
#include "io/mmap_file.h"
#include "io/torch_zip.h"
#include "models/turbovae/decoder.h"
#include "models/turbovae/weights.h"

namespace magi2 {
namespace {

// Standard deviation of a tensor's N(0, sd) draw (golden meta.json "init").
double init_std(const TurboVaeTensorSpec& s) {
  if (s.name.ends_with(".bias")) return 0.02;
  int64_t fan_in = 1;
  for (size_t d = 1; d < s.shape.size(); ++d) fan_in *= s.shape[d];
  double g = 1.0;
  if (s.name.ends_with(".conv1.conv.weight")) g = 1.4;
  if (s.name.ends_with(".resample.1.weight")) g = 1.3;
  if (s.name.ends_with(".time_conv.conv.weight")) g = 1.2;
  return g / std::sqrt(static_cast<double>(fan_in));
}

}  // namespace

TurboVaeConfig tiny_turbo_vae_config() {
  TurboVaeConfig c;
  c.latent_channels = 48;
  c.out_channels = 3;
  c.decoder_block_out_channels = {8, 12, 16, 24};
  c.decoder_layers_per_block = {2, 2, 2, 3, 3};
  c.decoder_spatio_temporal_scaling = {false, true, true, true};
  c.decoder_spatio_only = {false, true, false, false};
  c.decoder_is_dw_conv = {false, false, false, false, false};
  c.decoder_dw_kernel_size = 3;
  c.decoder_causal = false;
  c.patch_size = 2;
  c.patch_size_t = 1;
  c.resnet_norm_eps = 1e-6;
  c.first_chunk_size = 7;
  c.step_size = 7;
  c.spatial_compression_ratio = 16;
  c.temporal_compression_ratio = 4;
  c.use_unpatchify = true;
  return c;
}

TurboVaeConfig release_turbo_vae_config() {
  TurboVaeConfig c = tiny_turbo_vae_config();
  c.decoder_block_out_channels = {64, 128, 256, 512};  // spec §6.1
  return c;
}

void write_tiny_turbo_vae(const std::string& dir, uint64_t seed, const TurboVaeConfig& cfg) {
  cfg.validate("<tiny TurboVAE config>");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MAGI2_CHECK(!ec, "make-tiny: cannot create '", dir, "': ", ec.message());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& s : turbo_vae_tensor_specs(cfg)) {
    const double sd = init_std(s);
    const uint64_t key = fnv1a(s.name) ^ seed;
    Tensor t = seeded_tensor(s.shape, DType::F32, [&](uint64_t i) {
      // Box-Muller (cosine branch), one normal from two uniforms per element.
      const double r = std::sqrt(-2.0 * std::log(unit_uniform(key, 2 * i)));
      return r * std::cos(2.0 * M_PI * unit_uniform(key, 2 * i + 1)) * sd;
    });
    tensors.emplace_back("module." + s.name, std::move(t));
  }
  write_torch_checkpoint(dir + "/" + kTurboVaeCheckpointName, tensors, "ema_state_dict");
  write_file_atomic(dir + "/" + kTurboVaeConfigName, cfg.to_json());
}

}  // namespace magi2
