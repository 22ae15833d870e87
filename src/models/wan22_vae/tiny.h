// A tiny random-weight Wan2.2 VAE checkpoint in the official layout, for
// `magi2 make-tiny` and tests without the release `vae/Wan2.2_VAE.pth`
// (spec magi2-pipeline.md §6.3, §9; official inference/model/vae2_2.py
// `WanVAE_` module tree and `_video_vae` state dict).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace magi2 {

/// `WanVAE_` hyper-parameters. Defaults: the tiny golden configuration
/// (shared/golden/wan22_vae_encoder_tiny/wan_config.json); the release file
/// has dim 160, dec_dim 256 and the same other values.
struct Wan22VaeLayout {
  int64_t dim = 8;                                      ///< encoder c_dim
  int64_t dec_dim = 2;                                  ///< decoder base width
  int64_t z_dim = 48;                                   ///< latent channels
  std::vector<int64_t> dim_mult = {1, 2, 4, 4};
  int num_res_blocks = 2;
  std::vector<bool> temporal_downsample = {false, true, true};
};

/// The release Wan2.2_VAE.pth layout: dim 160, dec_dim 256, the rest as the tiny one.
inline Wan22VaeLayout release_wan22_vae_layout() {
  Wan22VaeLayout l;
  l.dim = 160;
  l.dec_dim = 256;
  return l;
}

/// Every tensor of the official state dict for `layout`, as (name, shape), in
/// the official order (module registration order: encoder.*, conv1.*,
/// conv2.*, decoder.*). All fp32 in the file.
std::vector<std::pair<std::string, Shape>> wan22_vae_tensor_specs(const Wan22VaeLayout& layout = {});

/// Writes `path` (e.g. MODEL/vae/Wan2.2_VAE.pth) as a torch.save zip holding
/// the plain state dict of wan22_vae_tensor_specs(layout), fp32, seeded random
/// like the golden init recipe: conv/linear weights N(0, g / sqrt(fan_in))
/// (g = 1.2 for residual-block convs, 0.5 for the attention proj, else 1),
/// RMS_norm gammas N(1, 0.1), biases N(0, 0.05). Values depend only on
/// (seed, tensor name, element index) (own SplitMix64 + Box-Muller), so a
/// seed gives identical files on every machine. Atomic (temp file + rename).
/// The encoder widths are recoverable from the shapes
/// (Wan22EncoderWeights::bind reads them). Errors: Error naming the path on
/// a write failure or a layout with an empty dim_mult / non-positive width.
void write_tiny_wan22_vae(const std::string& path, uint64_t seed, const Wan22VaeLayout& layout = {});

}  // namespace magi2
