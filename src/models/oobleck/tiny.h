// A seeded-random Stable Audio Open VAE in the official stable-audio-open-1.0/
// layout, for `magi2 make-tiny` and tests (spec magi2-pipeline.md §6.2, §9;
// architecture of shared/golden/sa_audio_vae_tiny: the release decoder with a
// small base width).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/oobleck/config.h"
#include "models/oobleck/weights.h"

namespace magi2 {

/// model_config.json text of the tiny VAE (2-space indented, trailing newline):
/// the official layout `{"model_type": "diffusion_cond", "sample_rate": 44100,
/// "audio_channels": 2, "model": {"pretransform": {"type": "autoencoder",
/// "config": {encoder, decoder, bottleneck vae, latent_dim 64,
/// downsampling_ratio 2048, io_channels 2}}}}` with the release strides
/// [2,4,4,8,8], c_mults [1,2,4,8,16], SnakeBeta, final_tanh false, encoder
/// latent_dim 128, and base width `channels` (release: 128). Never throws.
std::string tiny_sao_vae_config_json(int64_t channels = 4);

/// The base width of the release Stable Audio Open VAE (stable-audio-open-1.0).
constexpr int64_t kReleaseSaoChannels = 128;

/// Every tensor write_tiny_sao_vae(dir, seed, channels) stores, in file order
/// (all fp32): sao_vae_tensor_specs of the tiny config, then
/// "model.placeholder_not_vae" [4]. For size accounting (make-tiny). Never throws.
std::vector<SaoTensorSpec> tiny_sao_vae_tensor_specs(int64_t channels = 4);

/// Writes `dir`/model_config.json (tiny_sao_vae_config_json(channels)) and
/// `dir`/model.safetensors holding every tensor of sao_vae_tensor_specs (the
/// official pretransform.model.encoder.* and .decoder.* names, fp32) plus one
/// tensor outside the VAE ("model.placeholder_not_vae" [4], standing for the
/// diffusion model the real file holds). Values depend only on (seed, tensor
/// name, element index) (SplitMix64 + Box-Muller): weight_v N(0, 1), weight_g
/// U(0.5, 1), bias N(0, 0.02), SnakeBeta alpha N(0, 0.5) and beta N(0.5, 0.3)
/// (log scale), like the golden fixture's init. `dir` is created if missing;
/// each file is written atomically. Errors: Error naming the path that cannot
/// be created or written; channels < 1.
void write_tiny_sao_vae(const std::string& dir, uint64_t seed, int64_t channels = 4);

}  // namespace magi2
