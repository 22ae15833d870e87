// Wan2.2 VAE encoder, single-frame path (I2V reference image; spec
// magi2-pipeline.md §6.3; official inference/model/vae2_2.py
// `WanVAE_.encode` on a one-frame video = the first chunk of the cached
// causal encoder). fp32 weights and compute; channels-last activations
// [T=1, H, W, C]; every op through the Backend.
#pragma once

#include <functional>
#include <string>

#include "models/wan22_vae/weights.h"
#include "ops/ops.h"

namespace magi2 {

/// Receives intermediate activations (channels-last [1, H, W, C] f32 host
/// tensors, valid during the call) under the golden fixture's names: enc_conv1,
/// enc_down{i}, enc_mid{0,1,2}, enc_head, mu_logvar, latent.
using Wan22DumpFn = std::function<void(const std::string& name, const Tensor& x)>;

/// The encoder bound to its weights and a backend.
class Wan22Encoder {
 public:
  /// Binds `w` (shared, not copied) to `be`, which must outlive the encoder; on
  /// a device backend the weights are uploaded here, once.
  Wan22Encoder(const Wan22EncoderWeights& w, Backend& be);

  /// Total spatial downsampling (pixels per latent cell along H and W): the
  /// 2x2 patchify times 2 per downsampling stage (16 for the release layout).
  int64_t spatial_stride() const;

  /// Encodes one image. pixels: [3, H, W] f32 in [-1, 1] (the official input,
  /// already rounded to bf16 by the caller where the official does), H and W
  /// multiples of spatial_stride(), a host tensor. Returns the normalised latent
  /// (mu - mean) * (1/std) as [z_dim, 1, H/s, W/s] f32 (channel-first, the
  /// official `[1, 48, 1, h, w]` without the batch axis). Errors: Error on a
  /// bad pixel tensor shape.
  Tensor encode(const Tensor& pixels, const Wan22DumpFn& dump = {}) const;

 private:
  Tensor res_block(const Wan22ResBlock& r, const Tensor& x) const;
  Tensor attention_block(const Tensor& x) const;

  Wan22EncoderWeights w_;  // tensors share the caller's storage on the CPU
  Backend& be_;
};

}  // namespace magi2
