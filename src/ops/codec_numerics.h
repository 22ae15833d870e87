// Element formulas of the codec ops (ops/codec_params.h: Stable Audio Open decoder,
// TurboVAE decoder, Wan2.2 VAE encoder), one definition each for the CPU
// reference (src/cpu/conv1d.cpp, conv.cpp, video.cpp, wan_vae.cpp) and the
// CUDA kernels (src/cuda/audio_codec.cu, conv3d.cu, video_codec.cu,
// wan_vae.cu).
//
// Companion of ops/numerics.h (same rules: light header, host and device, no
// FMA contraction on either side). The exponential is glibc expf's on both
// sides (text_exp_f32), so SiLU and the softmax agree bit for bit; the sine of
// SnakeBeta is libm's sinf on the host and the double sine rounded to fp32 on
// the device, which may differ by an ulp.
#pragma once

#include <cstdint>

#include "ops/text_numerics.h"

namespace magi2 {

/// sin(x) in fp32 (host: libm sinf; device: sin in double rounded to fp32, the
/// correctly rounded value, within an ulp of sinf).
MAGI2_HD float codec_sin_f32(float x) {
#if defined(__CUDA_ARCH__)
  return static_cast<float>(sin(static_cast<double>(x)));
#else
  return __builtin_sinf(x);
#endif
}

/// SnakeBeta's per-channel frequency a = exp(alpha) when `logscale`, else alpha.
MAGI2_HD float snake_alpha(float alpha, bool logscale) { return logscale ? text_exp_f32(alpha) : alpha; }

/// SnakeBeta's per-channel 1 / (b + 1e-9) with b = exp(beta) when `logscale`, else beta.
MAGI2_HD float snake_inv_beta(float beta, bool logscale) {
  const float b = logscale ? text_exp_f32(beta) : beta;
  return 1.0f / (b + 1e-9f);
}

/// One SnakeBeta element: x + inv_b * sin(x * a)^2, in the official order.
MAGI2_HD float snake_beta_element(float x, float a, float inv_b) {
  const float s = codec_sin_f32(x * a);
  return x + inv_b * (s * s);
}

/// ReLU that keeps NaN (torch.relu): max(x, 0) by comparison.
MAGI2_HD float codec_relu(float x) { return x < 0.f ? 0.f : x; }

/// The decoded-frame value -> uint8 (FramesToU8Params): (x * 0.5) + 0.5 in two
/// fp32 ops, clamp to [0, 1], * 255, truncation; NaN gives 0.
MAGI2_HD uint8_t frame_to_u8(float x) {
  float e = x * 0.5f;
  e = e + 0.5f;
  if (e != e) return 0;
  e = e < 0.0f ? 0.0f : (e > 1.0f ? 1.0f : e);
  return static_cast<uint8_t>(e * 255.0f);
}

/// One latent de-normalisation element (LatentDenormParams): x / inv_std + mean.
MAGI2_HD float latent_denorm_element(float x, float inv_std, float mean) { return x / inv_std + mean; }

/// One channel-affine element (ChannelAffineParams): (x - shift) * mul.
MAGI2_HD float channel_affine_element(float x, float shift, float mul) { return (x - shift) * mul; }

/// The Wan2.2 RMS_norm denominator from the row's double sum of squares:
/// max(fp32(sqrt(ss)), 1e-12).
MAGI2_HD float channel_l2_denom(double ss) {
#if defined(__CUDA_ARCH__)
  const float d = static_cast<float>(sqrt(ss));
#else
  const float d = static_cast<float>(__builtin_sqrt(ss));
#endif
  return d < 1e-12f ? 1e-12f : d;  // std::max's order: NaN stays NaN
}

/// One Wan2.2 RMS_norm element: ((x / denom) * sqrt(C)) * gamma, then SiLU when `silu`.
MAGI2_HD float channel_l2_element(float x, float denom, float root_c, float gamma, bool silu) {
  const float v = ((x / denom) * root_c) * gamma;
  return silu ? text_silu(v) : v;
}

/// One AvgDown3D output (AvgDown3dParams): output channel o at output
/// position (to, ho, wo) is the mean of the folded channels [o G, (o+1) G),
/// flat index ((c*ft + it)*fs + ih)*fs + iw, summed in order in fp32 (frames
/// before the front padding read zeros), then / G. x [T, H, W, ci] f32.
MAGI2_HD float avg_down3d_element(const float* x, int64_t H, int64_t W, int64_t ci, int64_t pad_t, int64_t group,
                                  int64_t ft, int64_t fs, int64_t to, int64_t ho, int64_t wo, int64_t o) {
  float sum = 0.f;
  for (int64_t g = 0; g < group; ++g) {
    int64_t f = o * group + g;
    const int64_t iw = f % fs;
    f /= fs;
    const int64_t ih = f % fs;
    f /= fs;
    const int64_t it = f % ft;
    const int64_t c = f / ft;
    const int64_t t = to * ft + it - pad_t;
    if (t < 0) continue;  // padded frames are zeros
    sum += x[((t * H + ho * fs + ih) * W + wo * fs + iw) * ci + c];
  }
  return sum / static_cast<float>(group);
}

}  // namespace magi2
