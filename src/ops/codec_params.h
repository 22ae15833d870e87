// Parameter structs of the codec ops (Backend in ops.h): the Wan2.2 VAE
// encoder (I2V reference image), the TurboVAE video decoder and the Stable
// Audio Open (Oobleck) audio decoder. The conventions of ops.h apply (callers
// pass every output; row-strided 2-D views; fixed accumulation order).
// Included by ops.h; include ops.h, not this file.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace magi2 {

// ---- Wan2.2 VAE encoder ops (I2V reference image, spec pipeline §6.3; fp32) ----

/// Wan2.2 `RMS_norm` over the channels of each row (official vae2_2.py):
/// y = (x / max(||x||_2, 1e-12)) * sqrt(C) * gamma, then SiLU when `silu`
/// (the norm -> SiLU pairs of the residual blocks and the head). The squared
/// norm is accumulated in double in channel order. x [R, C] f32 (row-strided
/// ok), gamma [C] f32, y [R, C] f32 (may alias x).
struct ChannelL2NormParams {
  Tensor x;
  Tensor gamma;
  Tensor y;
  bool silu = false;
};

/// Wan2.2 `AvgDown3D` shortcut on channels-last video: the input is padded in
/// front with (factor_t - T % factor_t) % factor_t zero frames, folded into
/// channels (flat index ((c*ft + it)*fs + ih)*fs + iw for input channel c and
/// offsets it, ih, iw), and each output channel o is the mean of the flat
/// channels [o*G, (o+1)*G), G = C_in*ft*fs*fs / C_out (fp32 sum in order, then
/// / G). x [T, H, W, C_in] f32 with H, W divisible by fs; y [ceil(T/ft), H/fs,
/// W/fs, C_out] f32; C_in*ft*fs*fs must be a multiple of C_out.
struct AvgDown3dParams {
  Tensor x;
  Tensor y;
  int factor_t = 1;
  int factor_s = 1;
};

/// Single-head softmax attention in fp32 within consecutive blocks of
/// `block_rows` rows (Wan2.2 AttentionBlock: one block per frame, H*W
/// positions): o_i = sum_j softmax_j(scale * q_i.k_j) v_j over the rows j of
/// i's block. q, k, v, o [R, C] f32 (row-strided ok, e.g. column slices of
/// one qkv buffer); R must be a multiple of block_rows.
struct SpatialAttentionParams {
  Tensor q, k, v;
  Tensor o;
  int64_t block_rows = 0;
  float scale = 0.f;
};

/// Per-channel affine y[r, c] = (x[r, c] - shift[c]) * mul[c] in fp32 (the
/// latent normalisation (mu - mean) * (1/std), spec pipeline §6.3). x [R, C]
/// f32 (row-strided ok), shift/mul [C] f32, y [R, C] f32 (may alias x).
struct ChannelAffineParams {
  Tensor x;
  Tensor shift;
  Tensor mul;
  Tensor y;
};

// ---- Video decoder ops (TurboVAE, spec pipeline §6.1; conv3d serves the
// Wan2.2 VAE encoder too) ----

/// How a convolution fills the time positions before/after the input.
enum class TimePad : uint8_t {
  Zeros,      ///< zero frames (PyTorch padding="zeros"; Wan2.2 causal conv)
  Replicate,  ///< copies of the first/last frame (TurboVAE CausalConv3d, spec pipeline §6.1)
};

/// 3-D convolution over channels-last video activations (PyTorch nn.Conv3d /
/// nn.Conv2d semantics, groups 1); a 2-D conv is kT = 1 applied to every frame.
/// y[to, ho, wo, co] = round(round(sum_{kt,kh,kw,ci} x[ti, hi, wi, ci] *
/// w[co, kt, kh, kw, ci]) + bias[co]) with ti = to*stride_t + kt*dilation_t -
/// pad_front_t (likewise h, w); positions outside the input read zeros, except
/// in time with TimePad::Replicate (clamped to the first/last frame). fp32
/// accumulation in a fixed order (thread-count independent); "round" is the
/// identity for f32 and bf16 RNE for bf16 — the bias is added after the
/// rounded conv result, as PyTorch's cuDNN path does (conv, then add_(bias)).
/// x [T, H, W, C_in] f32|bf16 contiguous; w [C_out, kT, kH, kW, C_in] in x's
/// dtype (make it once at load with conv_weight_channels_last from the
/// PyTorch [C_out, C_in, kT, kH, kW] layout); bias optional [C_out] in x's
/// dtype; y [T_out, H_out, W_out, C_out] in x's dtype, contiguous, with
/// T_out = (T + pad_front_t + pad_back_t - dilation_t*(kT-1) - 1) / stride_t + 1
/// (likewise H_out, W_out). Must not alias x.
struct Conv3dParams {
  Tensor x;
  Tensor w;
  Tensor bias;  ///< optional
  Tensor y;
  std::array<int, 3> stride{1, 1, 1};     ///< (t, h, w)
  std::array<int, 3> dilation{1, 1, 1};   ///< (t, h, w)
  std::array<int, 3> pad_front{0, 0, 0};  ///< (t, h, w) positions before index 0
  std::array<int, 3> pad_back{0, 0, 0};   ///< (t, h, w) positions after the last index
  TimePad time_pad = TimePad::Zeros;      ///< H and W always pad with zeros
};

/// PyTorch conv weight [C_out, C_in, kT, kH, kW] (Conv3d) or [C_out, C_in, kH,
/// kW] (Conv2d, kT = 1), any float dtype, -> new contiguous CPU tensor
/// [C_out, kT, kH, kW, C_in] in `dtype` (f32 or bf16, RNE): the layout
/// Conv3dParams::w expects. Done once at load (host side).
Tensor conv_weight_channels_last(const Tensor& w, DType dtype);

/// Element-wise activations at the activation dtype (fp32 math, one rounding).
enum class Activation : uint8_t {
  SiLU,  ///< x / (1 + exp(-x)) (nn.SiLU)
  ReLU,  ///< max(x, 0) (nn.ReLU)
};

/// y = act(x); x, y [R, C] both f32 or both bf16 (row-strided ok; y may alias x).
struct ActivationParams {
  Tensor x;
  Tensor y;
  Activation kind = Activation::SiLU;
};

/// Nearest-neighbour spatial upsampling by integer factors (what
/// "nearest-exact" with an integer scale is: each pixel repeated):
/// y[t, h, w, c] = x[t, h / factor_h, w / factor_w, c]. x [T, H, W, C],
/// y [T, H*factor_h, W*factor_w, C], same dtype (any), contiguous.
struct UpsampleNearestParams {
  Tensor x;
  Tensor y;
  int factor_h = 2;
  int factor_w = 2;
};

/// Channel groups become frames (the `(n c) t -> c (t n)` rearrange of the
/// TurboVAE temporal upsampler, spec pipeline §6.1): frame t*n + s of the
/// result takes channels [s*C, (s+1)*C) of input frame t; the first
/// `drop_front` result frames are not written (first chunk drops frame 0).
/// x [T, H, W, n*C], y [T*n - drop_front, H, W, C], same dtype, contiguous.
struct ChannelsToTimeParams {
  Tensor x;
  Tensor y;
  int n = 2;
  int drop_front = 0;
};

/// TurboVAE unpatchify (spec pipeline §6.1): channel c*p*p + a*p + b at (h, w)
/// goes to pixel (row h*p + b, column w*p + a) of channel c.
/// x [T, H, W, C*p*p], y [T, H*p, W*p, C], same dtype, contiguous.
struct UnpatchifyParams {
  Tensor x;
  Tensor y;
  int patch = 2;
};

/// Latent de-normalisation into channels-last (TurboVAE `z / (1/std) + mean`,
/// spec pipeline §6.1): y[t, h, w, c] = round(f32(x[c, t, h, w]) / inv_std[c]
/// + mean[c]) in fp32 (a true division by the fp32 reciprocal, as upstream).
/// x [C, T, H, W] f32|bf16 contiguous, inv_std/mean [C] f32, y [T, H, W, C]
/// f32|bf16 contiguous.
struct LatentDenormParams {
  Tensor x;
  Tensor inv_std;
  Tensor mean;
  Tensor y;
};

/// Decoded frames -> uint8 (spec pipeline §7.1): v = f32(x) * 0.5, then + 0.5
/// (two fp32 ops), clamp to [0, 1], * 255, truncation toward zero.
/// x [R, C] f32|bf16 (row-strided ok), y [R, C] u8.
struct FramesToU8Params {
  Tensor x;
  Tensor y;
};

// ---- Stable Audio Open (Oobleck) VAE decoder ops (spec pipeline §6.2; fp32) ----

/// 1-D convolution over time on channels-last audio activations (torch
/// nn.Conv1d with zero padding; Stable Audio Open VAE, spec pipeline §6.2):
/// y[t, o] = (sum_{k, i} x[t*stride + k*dilation - padding, i] * w[k, i, o])
///           + bias[o] (+ residual[t, o]),
/// all f32, the (k, i) sum accumulated in fp32 in a fixed order, then the bias,
/// then the residual (the ResidualUnit skip `layers(x) + x`, fused).
/// x [Lin, Cin], w [K, Cin, Cout] (torch's [Cout, Cin, K] permuted so output
/// channels are innermost), bias optional [Cout], residual optional
/// [Lout, Cout] (may alias y, not x), y [Lout, Cout] with
/// Lout = (Lin + 2*padding - dilation*(K-1) - 1) / stride + 1. All contiguous.
struct Conv1dParams {
  Tensor x;
  Tensor w;
  Tensor bias;      ///< optional
  Tensor residual;  ///< optional
  Tensor y;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
};

/// Transposed 1-D convolution over time on channels-last activations (torch
/// nn.ConvTranspose1d, dilation 1, no output padding; the upsampler of the
/// Oobleck DecoderBlock, spec pipeline §6.2): input row j spreads to output
/// rows j*stride - padding + k, i.e.
/// y[t, o] = (sum over taps k with (t + padding - k) = j*stride, 0 <= j < Lin,
///            in ascending k, of sum_i x[j, i] * w[k, i, o]) + bias[o],
/// fp32 accumulation in a fixed order. x [Lin, Cin] f32, w [K, Cin, Cout] f32
/// (torch's [Cin, Cout, K] permuted), bias optional [Cout] f32, y [Lout, Cout]
/// f32 with Lout = (Lin - 1)*stride - 2*padding + K. All contiguous.
struct ConvTranspose1dParams {
  Tensor x;
  Tensor w;
  Tensor bias;  ///< optional
  Tensor y;
  int64_t stride = 1;
  int64_t padding = 0;
};

/// SnakeBeta activation per channel c (official sa_audio_vae.py SnakeBeta,
/// spec pipeline §6.2): a = exp(alpha_c), b = exp(beta_c) when `logscale`
/// (else the raw values), y = x + (1 / (b + 1e-9)) * sin(x * a)^2, fp32 with
/// the official operation order. x, y [L, C] f32 contiguous (y may alias x),
/// alpha, beta [C] f32.
struct SnakeBetaParams {
  Tensor x;
  Tensor alpha;
  Tensor beta;
  Tensor y;
  bool logscale = true;
};

}  // namespace magi2
