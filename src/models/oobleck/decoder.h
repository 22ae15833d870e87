// The Stable Audio Open VAE decoder (Oobleck) and the 44.1 kHz resample: the
// audio side of MAGI-2's decode (spec magi2-pipeline.md §6.2; official
// inference/pipeline/inference_engine.py decode_audio,
// inference/pipeline/audio_decoder.py SAAudioFeatureExtractor.decode,
// inference/model/sa_audio_vae.py OobleckDecoder). fp32 throughout;
// activations channels-last [L, C].
#pragma once

#include <functional>
#include <string>

#include "models/oobleck/config.h"
#include "models/oobleck/weights.h"
#include "ops/ops.h"

namespace magi2 {

/// Receives named intermediates (host tensors, valid only during the call):
/// "dec_layer0" (after the input conv), "dec_layer1".."dec_layer<n>" (after
/// each DecoderBlock), "waveform" (decoder output), all [L, C] f32.
using OobleckDump = std::function<void(const std::string& name, const Tensor& t)>;

/// Official time stretch of decode_audio: the decoder's 2048 samples per latent
/// frame at 25 latent frames/s are a 51.2 kHz timeline, resampled by 441/512
/// to the 44.1 kHz output (hard-coded there too).
inline constexpr int64_t kAudioResampleNum = 441;
inline constexpr int64_t kAudioResampleDen = 512;

/// The audio decoder of MAGI-2: final audio latent -> stereo waveform at
/// 44.1 kHz. Every tensor op runs on the given Backend (conv1d,
/// conv_transpose1d, snake_beta); only the resample runs on the host (FFTW).
/// On a device backend the weights are uploaded once at construction and the
/// latent on each decode; results and dumps come back as host tensors.
/// A decode allocates its activations per call (peak about 3 x L*2048 x 128
/// floats: ~0.8 GB for the 250-frame release clip).
class OobleckDecoder {
 public:
  /// Loads `<sao_dir>/model_config.json` and `<sao_dir>/model.safetensors`
  /// (stable-audio-open-1.0 layout; see SaoVaeConfig::load,
  /// OobleckDecoderWeights::load for the checks and errors). `be` must outlive
  /// the decoder.
  static OobleckDecoder load(const std::string& sao_dir, Backend& be);
  OobleckDecoder(SaoVaeConfig config, OobleckDecoderWeights weights, Backend& be);

  /// Decoder only: latent [L, latent_dim] or [1, L, latent_dim] f32 (the
  /// sampler's final audio latent; rescale is identity: mean 0, std 1) ->
  /// waveform [L * prod(strides), io_channels] f32 on the 51.2 kHz timeline,
  /// not clipped. Errors: wrong shape or dtype.
  Tensor decode_waveform(const Tensor& latent, const OobleckDump& dump = nullptr) const;

  /// decode_waveform, then fourier_resample to floor(N * 441 / 512) samples:
  /// [N * 441 / 512, io_channels] f32 at 44.1 kHz (250 latent frames ->
  /// 441,000 stereo samples).
  Tensor decode(const Tensor& latent, const OobleckDump& dump = nullptr) const;

  const SaoVaeConfig& config() const { return config_; }
  const OobleckDecoderWeights& weights() const { return weights_; }

 private:
  Tensor conv(const OobleckConv& c, const Tensor& x, const Tensor& residual = Tensor()) const;
  Tensor conv_transpose(const OobleckConv& c, const Tensor& x) const;
  void snake(const OobleckSnake& s, const Tensor& x, const Tensor& y) const;

  SaoVaeConfig config_;
  OobleckDecoderWeights weights_;
  Backend* be_;
};

}  // namespace magi2
