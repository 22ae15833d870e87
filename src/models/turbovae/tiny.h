// A tiny random-weight TurboVAE in the official folder layout, for
// `magi2 make-tiny` and tests without the release turbo_vae/ folder
// (spec magi2-pipeline.md §6.1, §9; layout of the official get_turbo_vaed).
#pragma once

#include <cstdint>
#include <string>

#include "models/turbovae/config.h"

namespace magi2 {

/// The tiny configuration: the release file (spec §6.1) with widths
/// decoder_block_out_channels (8, 12, 16, 24) instead of (64, 128, 256, 512),
/// i.e. shared/golden/turbo_vae_tiny/TurboV3-Wan22-tiny.json: 48 latent
/// channels, 16x spatial / 4x temporal compression, patch 2 + unpatchify,
/// first_chunk_size = step_size = 7, every block type of the release.
TurboVaeConfig tiny_turbo_vae_config();

/// The release configuration (TurboV3-Wan22-TinyShallow_7_7.json): the tiny
/// one at the release widths decoder_block_out_channels (64, 128, 256, 512).
TurboVaeConfig release_turbo_vae_config();

/// Writes `turbo_vae_dir`/TurboV3-Wan22-TinyShallow_7_7.json (the config in
/// the official JSON layout) and `turbo_vae_dir`/checkpoint.ckpt (torch.save
/// zip: {"ema_state_dict": {"module." + name: fp32 tensor}} for every name of
/// turbo_vae_tensor_specs(cfg)), creating the folder. Values are seeded
/// random like the golden init recipe (meta.json "init"): conv weights
/// N(0, g / sqrt(fan_in)) with g = 1.4 for ResBlock conv1, 1.3 for the
/// upsampler Conv2d, 1.2 for time_conv, else 1.0; biases N(0, 0.02). They
/// depend only on (seed, tensor name, element index) (own SplitMix64 +
/// Box-Muller), so a seed gives identical files on every machine. Each file
/// is written atomically. Error naming the path on a write failure.
void write_tiny_turbo_vae(const std::string& turbo_vae_dir, uint64_t seed,
                          const TurboVaeConfig& cfg = tiny_turbo_vae_config());

}  // namespace magi2
