// Stable Audio Open VAE (Oobleck autoencoder) configuration, read from the
// official stable-audio-open-1.0/model_config.json (spec magi2-pipeline.md
// §6.2; official inference/pipeline/audio_decoder.py _get_vae_only and
// inference/model/sa_audio_vae.py create_model_from_config).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace magi2 {

/// One Oobleck encoder or decoder (`model.pretransform.config.{encoder,decoder}.config`).
/// Absent keys take the defaults of the official OobleckEncoder/OobleckDecoder
/// constructors; unknown keys are ignored, as the official `**_kwargs` does.
struct OobleckCodecConfig {
  int64_t io_channels = 2;  ///< audio channels: encoder in_channels / decoder out_channels
  int64_t channels = 128;   ///< base width
  std::vector<int64_t> c_mults = {1, 2, 4, 8};   ///< width multipliers (a leading 1 is implied)
  std::vector<int64_t> strides = {2, 4, 8, 8};   ///< time ratio of each block
  int64_t latent_dim = 32;  ///< encoder: output channels (mean + scale); decoder: input channels
  bool use_snake = false;   ///< SnakeBeta activations (else ELU)
  bool final_tanh = true;   ///< decoder only
  bool use_nearest_upsample = false;  ///< decoder only
  bool soft_clip = false;   ///< decoder only (`model.pretransform.config.decoder.soft_clip`)

  /// Width after c_mults entry i of the implied list [1, c_mults...] (i = 0..size).
  int64_t width(size_t i) const { return (i == 0 ? 1 : c_mults[i - 1]) * channels; }
};

/// The autoencoder of `model.pretransform` plus the top-level sample rate.
struct SaoVaeConfig {
  int64_t sample_rate = 44100;       ///< top-level `sample_rate` (Hz)
  int64_t latent_dim = 64;           ///< latent channels the DiT produces
  int64_t downsampling_ratio = 2048; ///< waveform samples per latent frame
  int64_t io_channels = 2;           ///< stereo
  OobleckCodecConfig encoder;
  OobleckCodecConfig decoder;
  std::string source;  ///< file it was read from (for messages)

  /// Parses model_config.json text. Errors (one line naming `src` and the key):
  /// bad JSON, missing `model.pretransform`, a type other than autoencoder /
  /// oobleck / vae, wrong value kinds, and decoder options this engine does not
  /// implement (ELU activations, final tanh, nearest upsampling, soft clip), or
  /// prod(decoder strides) != downsampling_ratio, decoder latent_dim != latent_dim.
  static SaoVaeConfig from_json_text(const std::string& text, const std::string& src);
  /// Reads `<sao_dir>/model_config.json`.
  static SaoVaeConfig load(const std::string& sao_dir);
};

}  // namespace magi2
