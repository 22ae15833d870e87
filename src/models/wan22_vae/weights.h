// Wan2.2 VAE encoder weights bound by official tensor name from
// `vae/Wan2.2_VAE.pth` (spec magi2-pipeline.md §6.3, Appendix D.3; official
// inference/model/vae2_2.py `WanVAE_`: `encoder.*` and the top-level `conv1`).
// Widths are read from the tensor shapes (the release file has c_dim 160, the
// tiny fixtures c_dim 8), so no configuration file is needed.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace magi2 {

class TorchStateDict;

/// `ResidualBlock(in, out)`: residual = RMS_norm -> SiLU -> CausalConv3d 3^3 ->
/// RMS_norm -> SiLU -> CausalConv3d 3^3; shortcut = 1x1x1 conv when in != out.
struct Wan22ResBlock {
  int64_t in_dim = 0, out_dim = 0;
  Tensor gamma0;          ///< residual.0.gamma [in] f32
  Tensor conv0_w;         ///< residual.2: last temporal tap, conv layout [out, 1, 3, 3, in] f32
  Tensor conv0_b;         ///< [out]
  Tensor gamma1;          ///< residual.3.gamma [out]
  Tensor conv1_w;         ///< residual.6: last temporal tap [out, 1, 3, 3, out]
  Tensor conv1_b;         ///< [out]
  Tensor shortcut_w;      ///< shortcut [out, in] (undefined when in == out)
  Tensor shortcut_b;      ///< [out]
};

/// `Down_ResidualBlock` i: num_res_blocks ResidualBlocks, then (when
/// `spatial_down`) the Resample 2-D part (ZeroPad right/bottom 1, Conv2d 3x3
/// stride 2); output = main + AvgDown3D(factor_t, factor_s) of the block input.
struct Wan22DownBlock {
  int64_t in_dim = 0, out_dim = 0;
  std::vector<Wan22ResBlock> res;
  bool spatial_down = false;   ///< has `downsamples.{n}.resample.1` (factor_s 2)
  bool temporal_down = false;  ///< has `downsamples.{n}.time_conv` (downsample3d, factor_t 2)
  Tensor resample_w;           ///< resample.1 in conv layout [C, 1, 3, 3, C]
  Tensor resample_b;           ///< [C]
};

/// Every encoder tensor the single-frame encode uses (fp32, contiguous; conv
/// weights in the Conv3dParams layout [C_out, kT, kH, kW, C_in]).
struct Wan22EncoderWeights {
  int64_t dim = 0;       ///< c_dim: width of encoder.conv1
  int64_t z_dim = 0;     ///< latent channels (48): head emits 2*z_dim (mu, log_var)
  Tensor conv1_w;        ///< encoder.conv1, last temporal tap [dim, 1, 3, 3, 12]
  Tensor conv1_b;        ///< [dim]
  std::vector<Wan22DownBlock> down;
  Wan22ResBlock mid0, mid2;               ///< encoder.middle.0 / .2
  Tensor attn_gamma;                      ///< middle.1.norm.gamma [C]
  Tensor attn_qkv_w, attn_qkv_b;          ///< middle.1.to_qkv [3C, C], [3C]
  Tensor attn_proj_w, attn_proj_b;        ///< middle.1.proj [C, C], [C]
  Tensor head_gamma;                      ///< head.0.gamma [C]
  Tensor head_w, head_b;                  ///< head.2 last temporal tap [2z, 1, 3, 3, C], [2z]
  Tensor quant_w, quant_b;                ///< top-level conv1 [2z, 2z], [2z]

  /// Binds from a plain state dict (official key names). The layout (number
  /// of stages, residual blocks per stage, widths, which stages downsample in
  /// space and time) is inferred from the names and shapes present; every
  /// `encoder.*` / `conv1.*` tensor must be used and have the expected shape
  /// and fp32 dtype; `decoder.*` and `conv2.*` are ignored. Missing,
  /// unexpected and wrong-shape tensors are reported together in one Error
  /// naming the file.
  static Wan22EncoderWeights bind(const TorchStateDict& sd);

  /// load_torch_checkpoint(path) (a plain state dict, e.g.
  /// MODEL/vae/Wan2.2_VAE.pth) then bind(); the decoder tensors are released
  /// when this returns. Errors: as load_torch_checkpoint and bind.
  static Wan22EncoderWeights load(const std::string& path);
};

}  // namespace magi2
