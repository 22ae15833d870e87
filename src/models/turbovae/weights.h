// TurboVAE decoder weights: the official tensor names (spec magi2-pipeline.md
// Appendix D.1, module tree of official turbo_vaed.py TurboVAEDDecoder3d),
// strict binding from the checkpoint's state dict, and the load-time repack
// of every conv weight into the channels-last layout of Backend::conv3d.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/torch_zip.h"
#include "models/turbovae/config.h"

namespace magi2 {

/// One checkpoint tensor the decoder consumes: official name (after the
/// "module." prefix is stripped, e.g. "decoder.conv_in.conv.weight") and shape.
struct TurboVaeTensorSpec {
  std::string name;
  Shape shape;
};

/// Every tensor of the decoder for `cfg`, in module order (80 for the release).
std::vector<TurboVaeTensorSpec> turbo_vae_tensor_specs(const TurboVaeConfig& cfg);

/// A bound convolution: w [C_out, kT, kH, kW, C_in] and bias [C_out], both in
/// the compute dtype (the official loader casts the fp32 checkpoint to the
/// pipeline dtype, RNE), ready for Conv3dParams.
struct TurboConv {
  Tensor w;
  Tensor b;
  int64_t out_channels() const { return w.size(0); }
};

/// TurboVAEDResNetBlock3d (spec §6.1 ResBlock): conv1, conv2 (3x3x3) and, when
/// the width changes, conv_shortcut (1x1x1) behind an RMS norm.
struct TurboResBlock {
  TurboConv conv1, conv2;
  TurboConv conv_shortcut;   ///< defined only when in != out
  bool relu_first = false;   ///< is_upsampler_modified: ReLU instead of SiLU before conv1
  bool has_shortcut() const { return conv_shortcut.w.defined(); }
};

/// WanResample: `time_conv` (kernel (3,1,1), C -> 2C; upsample3d only) and
/// `resample.1` (Conv2d 3x3, C -> C) after nearest x2.
struct TurboUpsampler {
  bool temporal = false;     ///< mode "upsample3d" (else "upsample2d")
  TurboConv time_conv;       ///< defined when temporal
  TurboConv resample;
};

/// TurboVAEDUpBlock3d: optional conv_in ResBlock (width change), optional
/// upsampler, then `resnets`.
struct TurboUpBlock {
  bool has_conv_in = false;
  TurboResBlock conv_in;
  bool has_upsampler = false;
  TurboUpsampler upsampler;
  std::vector<TurboResBlock> resnets;
};

/// All decoder weights in module order.
struct TurboVaeWeights {
  DType dtype = DType::BF16;     ///< compute dtype of weights and activations
  TurboConv conv_in;
  std::vector<TurboResBlock> mid_block;
  std::vector<TurboUpBlock> up_blocks;
  TurboConv conv_out;
};

/// Binds the decoder tensors of `sd` (a TurboVAE state dict as saved: keys
/// with or without the "module." prefix; "decoder."-prefixed, or relative to
/// the decoder as the official fallback load accepts) and converts them to
/// `dtype` (BF16 = the official pipeline, F32 = an fp32 reference). Tensors
/// the decoder does not use (e.g. aligned_feature_projection_heads.*) are
/// ignored, as the official non-strict load does. Error (one line naming
/// `sd.path()`) listing every missing tensor and every shape mismatch
/// (expected vs got), or a non-float tensor.
TurboVaeWeights bind_turbo_vae_weights(const TurboVaeConfig& cfg, const TorchStateDict& sd, DType dtype);

}  // namespace magi2
