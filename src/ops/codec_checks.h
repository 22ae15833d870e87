// Argument checks of the codec ops (ops/codec_params.h: the Stable Audio Open decoder, the
// TurboVAE decoder, the Wan2.2 VAE encoder), one per op, shared by the CPU and
// CUDA backends: the same errors whatever the device. Each returns the sizes
// the op derives from its operands. Light header.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"
#include "ops/ops.h"

namespace magi2 {

/// Sizes of a conv1d / conv_transpose1d call: rows in/out, channels in/out, taps.
struct Conv1dDims {
  int64_t lin = 0, lout = 0, cin = 0, cout = 0, taps = 0;
};
/// The most taps a 1-D convolution may have (the CPU tile's tap table).
constexpr int64_t kConv1dMaxTaps = 64;
/// Checks Conv1dParams on `device` (all f32 contiguous; y must not alias x).
Conv1dDims check_conv1d(const Conv1dParams& p, Device device);
/// Checks ConvTranspose1dParams on `device` (all f32 contiguous; y must not alias x).
Conv1dDims check_conv_transpose1d(const ConvTranspose1dParams& p, Device device);
/// Checks SnakeBetaParams on `device`; returns {rows, channels}.
std::array<int64_t, 2> check_snake_beta(const SnakeBetaParams& p, Device device);

/// Sizes of a conv3d call: input [T, H, W, C_in], kernel (kT, kH, kW), output
/// [T_out, H_out, W_out, C_out].
struct Conv3dDims {
  std::array<int64_t, 3> in{}, kernel{}, out{};
  int64_t cin = 0, cout = 0;
};
/// Checks Conv3dParams on `device` (x, w, y, bias one float dtype; y the size the
/// stride/dilation/padding give; y must not alias x).
Conv3dDims check_conv3d(const Conv3dParams& p, Device device);
/// Checks ActivationParams on `device`; returns {rows, cols}.
std::array<int64_t, 2> check_activation(const ActivationParams& p, Device device);
/// Checks UpsampleNearestParams on `device`; returns x's [T, H, W, C].
std::array<int64_t, 4> check_upsample_nearest(const UpsampleNearestParams& p, Device device);
/// Checks ChannelsToTimeParams on `device`; returns x's [T, H, W, C/n].
std::array<int64_t, 4> check_channels_to_time(const ChannelsToTimeParams& p, Device device);
/// Checks UnpatchifyParams on `device`; returns x's [T, H, W, C/(p*p)].
std::array<int64_t, 4> check_unpatchify(const UnpatchifyParams& p, Device device);
/// Checks LatentDenormParams on `device`; returns x's [C, T, H, W].
std::array<int64_t, 4> check_latent_denorm(const LatentDenormParams& p, Device device);
/// Checks FramesToU8Params on `device`; returns {rows, cols}.
std::array<int64_t, 2> check_frames_to_u8(const FramesToU8Params& p, Device device);

/// Checks ChannelL2NormParams on `device`; returns {rows, cols}.
std::array<int64_t, 2> check_channel_l2_norm(const ChannelL2NormParams& p, Device device);
/// Sizes of an avg_down3d call: input [T, H, W, C_in], output [T_out, H_out,
/// W_out, C_out], the front padding in frames and the group size G.
struct AvgDown3dDims {
  int64_t T = 0, H = 0, W = 0, ci = 0, to = 0, ho = 0, wo = 0, co = 0, pad_t = 0, group = 0;
};
/// Checks AvgDown3dParams on `device`.
AvgDown3dDims check_avg_down3d(const AvgDown3dParams& p, Device device);
/// Checks SpatialAttentionParams on `device`; returns {rows, cols}.
std::array<int64_t, 2> check_spatial_attention(const SpatialAttentionParams& p, Device device);
/// Checks ChannelAffineParams on `device`; returns {rows, cols}.
std::array<int64_t, 2> check_channel_affine(const ChannelAffineParams& p, Device device);

}  // namespace magi2
