// Stable Audio Open VAE tensors bound by official name (spec magi2-pipeline.md
// §6.2, Appendix D.2; official inference/model/sa_audio_vae.py module tree and
// inference/pipeline/audio_decoder.py _get_vae_only).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/oobleck/config.h"

namespace magi2 {

/// Prefix of the VAE inside stable-audio-open-1.0/model.safetensors.
inline constexpr const char* kSaoVaePrefix = "pretransform.model.";

/// One expected tensor: full checkpoint name and shape (fp32 parameter).
struct SaoTensorSpec {
  std::string name;
  Shape shape;
};

/// Every parameter of the official AudioAutoencoder for `c`, full names
/// (kSaoVaePrefix + "encoder." / "decoder." + module path), encoder first, in
/// module order: weight-normed convs as weight_g [out|in, 1, 1], weight_v and
/// bias, SnakeBeta as alpha/beta [C] (none with ELU). Used by the binder and by
/// the tiny-model writer.
std::vector<SaoTensorSpec> sao_vae_tensor_specs(const SaoVaeConfig& c);

/// A weight-normed convolution with the norm folded in (w = g * v / ||v||,
/// per weight_v slice along dim 0, fp32), stored as the conv1d /
/// conv_transpose1d ops take it: [K, Cin, Cout] f32.
struct OobleckConv {
  Tensor w;     ///< [K, Cin, Cout]
  Tensor bias;  ///< [Cout] or undefined (the final conv has none)
  int64_t stride = 1, padding = 0, dilation = 1;
};

/// SnakeBeta log-scale parameters [C] f32.
struct OobleckSnake {
  Tensor alpha, beta;
};

/// ResidualUnit(C, dilation): x + conv2(snake2(conv1(snake1(x)))), conv1 k7 dilated, conv2 k1.
struct OobleckResidualUnit {
  OobleckSnake snake1, snake2;  ///< layers.0, layers.2
  OobleckConv conv1, conv2;     ///< layers.1, layers.3
};

/// DecoderBlock(in, out, s): snake (layers.0), transposed conv k 2s stride s
/// padding ceil(s/2) (layers.1), residual units with dilation 1, 3, 9 (layers.2-4).
struct OobleckDecoderBlock {
  OobleckSnake snake;
  OobleckConv upsample;
  std::array<OobleckResidualUnit, 3> res;
};

/// The decoder (`decoder.layers.*`): conv k7 latent->top width (layers.0), the
/// blocks from the widest to the narrowest (layers.1..n), snake (layers.n+1),
/// conv k7 to the audio channels without bias (layers.n+2).
struct OobleckDecoderWeights {
  OobleckConv conv_in;
  std::vector<OobleckDecoderBlock> blocks;
  OobleckSnake snake_out;
  OobleckConv conv_out;
  size_t num_tensors = 0;  ///< checkpoint tensors read (decoder only)

  /// Reads `safetensors_path` (stable-audio-open-1.0/model.safetensors). Like the official strict
  /// load_state_dict of the whole autoencoder, the tensors under
  /// kSaoVaePrefix must be exactly sao_vae_tensor_specs(c) (encoder included,
  /// shapes checked; F32/F16/BF16 accepted and widened); everything else in
  /// the file (the diffusion model) is ignored. Missing, unexpected and
  /// wrong-shape tensors are reported together in one Error naming the file.
  static OobleckDecoderWeights load(const std::string& safetensors_path, const SaoVaeConfig& c);
};

}  // namespace magi2
