// Entry points of the CUDA backend's codec ops (ops.h: the Stable Audio Open
// decoder, the TurboVAE decoder, the Wan2.2 VAE encoder). Host-side
// declarations; kernels in audio_codec.cu, conv3d.cu, video_codec.cu and
// wan_vae.cu. Each checks its operands (ops/codec_checks.h: the CPU backend's
// errors), enqueues on `s` and returns without a host wait; none allocates.
//
// The element formulas are ops/codec_numerics.h, shared with the CPU, and every
// sum runs in the CPU's order (one thread per output, fp32, no FMA), so each op
// gives the CPU's bytes except snake_beta (the device sine: within an ulp).
#pragma once

#include <cuda_runtime.h>

#include "ops/ops.h"

namespace magi2::cuda {

/// Conv1dParams: a tile of 64 output channels x 32 rows per block, each output
/// summed over (tap, input channel) ascending as the CPU, then bias, then the
/// residual: bit-identical (audio_codec.cu).
void conv1d(const Conv1dParams& p, cudaStream_t s);
/// ConvTransposeParams: one launch per output phase (t + padding) mod stride,
/// the phase's taps ascending as the CPU: bit-identical (audio_codec.cu).
void conv_transpose1d(const ConvTranspose1dParams& p, cudaStream_t s);
/// SnakeBetaParams: one thread per element; the sine may be an ulp from libm's (audio_codec.cu).
void snake_beta(const SnakeBetaParams& p, cudaStream_t s);

/// Conv3dParams: implicit GEMM on the CUDA cores, tiles of 64 positions x 64
/// output channels, K = (kt, kh, kw, c_in) summed in ascending order in fp32
/// (bf16 operands widened exactly), the conv result rounded, then the bias:
/// bit-identical to the CPU (conv3d.cu).
void conv3d(const Conv3dParams& p, cudaStream_t s);
/// The TurboVAE element-wise and layout ops: bit-identical (video_codec.cu).
void activation(const ActivationParams& p, cudaStream_t s);
void upsample_nearest(const UpsampleNearestParams& p, cudaStream_t s);
void channels_to_time(const ChannelsToTimeParams& p, cudaStream_t s);
void unpatchify(const UnpatchifyParams& p, cudaStream_t s);
void latent_denorm(const LatentDenormParams& p, cudaStream_t s);
void frames_to_u8(const FramesToU8Params& p, cudaStream_t s);

/// ChannelL2NormParams: one thread per row (the double sum in channel order). wan_vae.cu.
void channel_l2_norm(const ChannelL2NormParams& p, cudaStream_t s);
/// AvgDown3dParams: one thread per output element, the group summed in order. wan_vae.cu.
void avg_down3d(const AvgDown3dParams& p, cudaStream_t s);
/// SpatialAttentionParams: one block per query row, scores in dot_f32's order,
/// glibc-exact exp, the row sum and P V in key order: bit-identical. Blocks of
/// at most 48K rows (the scores live in shared memory; Error beyond). wan_vae.cu.
void spatial_attention(const SpatialAttentionParams& p, cudaStream_t s);
/// ChannelAffineParams: one thread per element. wan_vae.cu.
void channel_affine(const ChannelAffineParams& p, cudaStream_t s);

}  // namespace magi2::cuda
