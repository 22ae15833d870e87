#include "ops/codec_checks.h"

#include <string>

#include "core/error.h"
#include "ops/op_checks.h"

namespace magi2 {

namespace {

const char* device_word(Device d) { return d == Device::CUDA ? "GPU" : "CPU"; }

bool is_float(DType t) { return t == DType::BF16 || t == DType::F32; }

void check_on(const Tensor& t, Device device, const char* what) {
  MAGI2_CHECK(t.defined() && t.device() == device, what, ": expected a ", device_word(device), " tensor");
}

void check_f32_contiguous_2d(const Tensor& t, int64_t rows, int64_t cols, Device device, const char* what) {
  check_2d_on(device, t, rows, cols, what);
  MAGI2_CHECK(t.dtype() == DType::F32 && t.is_contiguous(), what, ": expected contiguous f32");
}

void check_f32_2d(const Tensor& t, int64_t rows, int64_t cols, Device device, const char* what) {
  check_2d_on(device, t, rows, cols, what);
  MAGI2_CHECK(t.dtype() == DType::F32, what, ": expected f32");
}

// A small f32 parameter vector of n values on `device` (contiguous).
void check_f32_vec(const Tensor& t, int64_t n, Device device, const char* what) {
  MAGI2_CHECK(t.defined() && t.device() == device && t.dtype() == DType::F32 && t.numel() == n && t.is_contiguous(),
              what, ": expected ", n, " contiguous f32 values on the ", device_word(device), ", got ",
              t.defined() ? shape_str(t.shape()) : std::string("none"));
}

void check_4d(const Tensor& t, Device device, const char* what) {
  check_on(t, device, what);
  MAGI2_CHECK(t.dim() == 4 && t.is_contiguous(), what, ": expected a contiguous [T, H, W, C] tensor, got ",
              shape_str(t.shape()));
}

void check_f32_video(const Tensor& t, Device device, const char* what) {
  check_4d(t, device, what);
  MAGI2_CHECK(t.dtype() == DType::F32, what, ": expected a contiguous f32 [T, H, W, C] tensor");
}

void check_float(const Tensor& t, const char* what) {
  MAGI2_CHECK(is_float(t.dtype()), what, ": expected f32 or bf16");
}

void check_conv1d_weights(const Tensor& w, int64_t taps, int64_t cin, int64_t cout, Device device,
                          const char* what) {
  MAGI2_CHECK(w.defined() && w.device() == device && w.dtype() == DType::F32 && w.is_contiguous() &&
                  w.dim() == 3 && w.size(0) == taps && w.size(1) == cin && w.size(2) == cout,
              what, ": expected contiguous f32 [", taps, ", ", cin, ", ", cout, "] on the ", device_word(device),
              ", got ", w.defined() ? shape_str(w.shape()) : std::string("nothing"));
  MAGI2_CHECK(taps <= kConv1dMaxTaps, what, ": at most ", kConv1dMaxTaps, " taps, got ", taps);
}

void check_conv1d_bias(const Tensor& b, int64_t cout, Device device, const char* what) {
  if (b.defined()) check_f32_vec(b, cout, device, what);
}

}  // namespace

Conv1dDims check_conv1d(const Conv1dParams& p, Device device) {
  MAGI2_CHECK(p.x.defined() && p.x.dim() == 2 && p.w.defined() && p.w.dim() == 3,
              "conv1d: expected x [Lin, Cin] and w [K, Cin, Cout]");
  Conv1dDims d{.lin = p.x.size(0), .cin = p.x.size(1), .cout = p.w.size(2), .taps = p.w.size(0)};
  MAGI2_CHECK(p.stride >= 1 && p.dilation >= 1 && p.padding >= 0, "conv1d: bad stride/dilation/padding");
  d.lout = (d.lin + 2 * p.padding - p.dilation * (d.taps - 1) - 1) / p.stride + 1;
  MAGI2_CHECK(d.lin + 2 * p.padding - p.dilation * (d.taps - 1) - 1 >= 0, "conv1d: input of ", d.lin,
              " rows is shorter than the kernel");
  check_f32_contiguous_2d(p.x, d.lin, d.cin, device, "conv1d.x");
  check_conv1d_weights(p.w, d.taps, d.cin, d.cout, device, "conv1d.w");
  check_f32_contiguous_2d(p.y, d.lout, d.cout, device, "conv1d.y");
  MAGI2_CHECK(p.y.data() != p.x.data(), "conv1d: y must not alias x");
  check_conv1d_bias(p.bias, d.cout, device, "conv1d.bias");
  if (p.residual.defined()) {
    check_f32_contiguous_2d(p.residual, d.lout, d.cout, device, "conv1d.residual");
    MAGI2_CHECK(p.residual.data() != p.x.data(), "conv1d: residual must not alias x");
  }
  return d;
}

Conv1dDims check_conv_transpose1d(const ConvTranspose1dParams& p, Device device) {
  MAGI2_CHECK(p.x.defined() && p.x.dim() == 2 && p.w.defined() && p.w.dim() == 3,
              "conv_transpose1d: expected x [Lin, Cin] and w [K, Cin, Cout]");
  Conv1dDims d{.lin = p.x.size(0), .cin = p.x.size(1), .cout = p.w.size(2), .taps = p.w.size(0)};
  MAGI2_CHECK(p.stride >= 1 && p.padding >= 0, "conv_transpose1d: bad stride/padding");
  d.lout = (d.lin - 1) * p.stride - 2 * p.padding + d.taps;
  MAGI2_CHECK(d.lout >= 1, "conv_transpose1d: empty output for ", d.lin, " input rows");
  check_f32_contiguous_2d(p.x, d.lin, d.cin, device, "conv_transpose1d.x");
  check_conv1d_weights(p.w, d.taps, d.cin, d.cout, device, "conv_transpose1d.w");
  check_f32_contiguous_2d(p.y, d.lout, d.cout, device, "conv_transpose1d.y");
  MAGI2_CHECK(p.y.data() != p.x.data(), "conv_transpose1d: y must not alias x");
  check_conv1d_bias(p.bias, d.cout, device, "conv_transpose1d.bias");
  return d;
}

std::array<int64_t, 2> check_snake_beta(const SnakeBetaParams& p, Device device) {
  MAGI2_CHECK(p.x.defined() && p.x.dim() == 2, "snake_beta: expected x [L, C]");
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  check_f32_contiguous_2d(p.x, rows, cols, device, "snake_beta.x");
  check_f32_contiguous_2d(p.y, rows, cols, device, "snake_beta.y");
  check_f32_vec(p.alpha, cols, device, "snake_beta.alpha");
  check_f32_vec(p.beta, cols, device, "snake_beta.beta");
  return {rows, cols};
}

Conv3dDims check_conv3d(const Conv3dParams& p, Device device) {
  check_4d(p.x, device, "conv3d.x");
  check_4d(p.y, device, "conv3d.y");
  const DType dt = p.x.dtype();
  MAGI2_CHECK(is_float(dt), "conv3d.x: expected f32 or bf16");
  MAGI2_CHECK(p.y.dtype() == dt && p.w.defined() && p.w.dtype() == dt, "conv3d: x, w and y must share one dtype");
  check_on(p.w, device, "conv3d.w");
  MAGI2_CHECK(p.w.dim() == 5 && p.w.is_contiguous(), "conv3d.w: expected contiguous [C_out, kT, kH, kW, C_in], got ",
              shape_str(p.w.shape()));
  Conv3dDims d;
  d.in = {p.x.size(0), p.x.size(1), p.x.size(2)};
  d.cin = p.x.size(3);
  d.cout = p.w.size(0);
  d.kernel = {p.w.size(1), p.w.size(2), p.w.size(3)};
  MAGI2_CHECK(p.w.size(4) == d.cin, "conv3d.w: C_in ", p.w.size(4), " does not match x's ", d.cin, " channels");
  for (int a = 0; a < 3; ++a) {
    MAGI2_CHECK(p.stride[a] >= 1 && p.dilation[a] >= 1 && p.pad_front[a] >= 0 && p.pad_back[a] >= 0,
                "conv3d: stride/dilation must be >= 1 and padding >= 0");
    const int64_t span = d.in[a] + p.pad_front[a] + p.pad_back[a] - p.dilation[a] * (d.kernel[a] - 1) - 1;
    MAGI2_CHECK(span >= 0, "conv3d: input ", shape_str(p.x.shape()), " is smaller than the kernel");
    d.out[a] = span / p.stride[a] + 1;
  }
  check_tensor(p.y, {d.out[0], d.out[1], d.out[2], d.cout}, dt, "conv3d.y");
  if (p.bias.defined()) {
    check_on(p.bias, device, "conv3d.bias");
    MAGI2_CHECK(p.bias.dtype() == dt && p.bias.numel() == d.cout && p.bias.is_contiguous(), "conv3d.bias: expected ",
                d.cout, " values of the activation dtype, got ", shape_str(p.bias.shape()));
  }
  MAGI2_CHECK(p.x.data() != p.y.data(), "conv3d: y must not alias x");
  return d;
}

std::array<int64_t, 2> check_activation(const ActivationParams& p, Device device) {
  MAGI2_CHECK(p.x.defined() && p.x.dim() == 2, "activation.x: expected a 2-D tensor");
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  check_2d_on(device, p.x, rows, cols, "activation.x");
  check_2d_on(device, p.y, rows, cols, "activation.y");
  check_float(p.x, "activation.x");
  MAGI2_CHECK(p.y.dtype() == p.x.dtype(), "activation: x and y must share one dtype");
  return {rows, cols};
}

std::array<int64_t, 4> check_upsample_nearest(const UpsampleNearestParams& p, Device device) {
  check_4d(p.x, device, "upsample_nearest.x");
  check_4d(p.y, device, "upsample_nearest.y");
  MAGI2_CHECK(p.factor_h >= 1 && p.factor_w >= 1, "upsample_nearest: factors must be >= 1");
  const int64_t T = p.x.size(0), H = p.x.size(1), W = p.x.size(2), C = p.x.size(3);
  check_tensor(p.y, {T, H * p.factor_h, W * p.factor_w, C}, p.x.dtype(), "upsample_nearest.y");
  return {T, H, W, C};
}

std::array<int64_t, 4> check_channels_to_time(const ChannelsToTimeParams& p, Device device) {
  check_4d(p.x, device, "channels_to_time.x");
  check_4d(p.y, device, "channels_to_time.y");
  const int64_t T = p.x.size(0), H = p.x.size(1), W = p.x.size(2);
  MAGI2_CHECK(p.n >= 1 && p.x.size(3) % p.n == 0, "channels_to_time: ", p.x.size(3), " channels do not split into ",
              p.n, " groups");
  const int64_t C = p.x.size(3) / p.n;
  MAGI2_CHECK(p.drop_front >= 0 && p.drop_front <= T * p.n, "channels_to_time: bad drop_front ", p.drop_front);
  check_tensor(p.y, {T * p.n - p.drop_front, H, W, C}, p.x.dtype(), "channels_to_time.y");
  return {T, H, W, C};
}

std::array<int64_t, 4> check_unpatchify(const UnpatchifyParams& p, Device device) {
  check_4d(p.x, device, "unpatchify.x");
  check_4d(p.y, device, "unpatchify.y");
  const int64_t T = p.x.size(0), H = p.x.size(1), W = p.x.size(2), pp = int64_t{p.patch} * p.patch;
  MAGI2_CHECK(p.patch >= 1 && p.x.size(3) % pp == 0, "unpatchify: ", p.x.size(3), " channels are not C*", p.patch,
              "*", p.patch);
  const int64_t C = p.x.size(3) / pp;
  check_tensor(p.y, {T, H * p.patch, W * p.patch, C}, p.x.dtype(), "unpatchify.y");
  return {T, H, W, C};
}

std::array<int64_t, 4> check_latent_denorm(const LatentDenormParams& p, Device device) {
  check_on(p.x, device, "latent_denorm.x");
  MAGI2_CHECK(p.x.dim() == 4 && p.x.is_contiguous(), "latent_denorm.x: expected contiguous [C, T, H, W]");
  check_4d(p.y, device, "latent_denorm.y");
  check_float(p.x, "latent_denorm.x");
  check_float(p.y, "latent_denorm.y");
  const int64_t C = p.x.size(0), T = p.x.size(1), H = p.x.size(2), W = p.x.size(3);
  check_tensor(p.y, {T, H, W, C}, p.y.dtype(), "latent_denorm.y");
  check_f32_vec(p.inv_std, C, device, "latent_denorm.inv_std");
  check_f32_vec(p.mean, C, device, "latent_denorm.mean");
  return {C, T, H, W};
}

std::array<int64_t, 2> check_frames_to_u8(const FramesToU8Params& p, Device device) {
  MAGI2_CHECK(p.x.defined() && p.x.dim() == 2, "frames_to_u8.x: expected a 2-D tensor");
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  check_2d_on(device, p.x, rows, cols, "frames_to_u8.x");
  check_2d_on(device, p.y, rows, cols, "frames_to_u8.y");
  check_float(p.x, "frames_to_u8.x");
  MAGI2_CHECK(p.y.dtype() == DType::U8, "frames_to_u8.y: expected u8");
  return {rows, cols};
}

std::array<int64_t, 2> check_channel_l2_norm(const ChannelL2NormParams& p, Device device) {
  MAGI2_CHECK(p.x.defined() && p.x.dim() == 2, "channel_l2_norm.x: expected a 2-D tensor");
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  check_f32_2d(p.x, rows, cols, device, "channel_l2_norm.x");
  check_f32_2d(p.y, rows, cols, device, "channel_l2_norm.y");
  check_f32_vec(p.gamma, cols, device, "channel_l2_norm.gamma");
  return {rows, cols};
}

AvgDown3dDims check_avg_down3d(const AvgDown3dParams& p, Device device) {
  check_f32_video(p.x, device, "avg_down3d.x");
  check_f32_video(p.y, device, "avg_down3d.y");
  const int64_t ft = p.factor_t, fs = p.factor_s;
  MAGI2_CHECK(ft >= 1 && fs >= 1, "avg_down3d: factors must be >= 1");
  AvgDown3dDims d{.T = p.x.size(0), .H = p.x.size(1), .W = p.x.size(2), .ci = p.x.size(3)};
  d.pad_t = (ft - d.T % ft) % ft;
  d.to = (d.T + d.pad_t) / ft;
  d.ho = d.H / fs;
  d.wo = d.W / fs;
  d.co = p.y.size(3);
  MAGI2_CHECK(d.H % fs == 0 && d.W % fs == 0, "avg_down3d: H, W (", d.H, ", ", d.W, ") not divisible by ", fs);
  MAGI2_CHECK(p.y.size(0) == d.to && p.y.size(1) == d.ho && p.y.size(2) == d.wo, "avg_down3d.y: expected [", d.to,
              ", ", d.ho, ", ", d.wo, ", C], got ", shape_str(p.y.shape()));
  const int64_t folded = d.ci * ft * fs * fs;
  MAGI2_CHECK(d.co >= 1 && folded % d.co == 0, "avg_down3d: ", folded, " folded channels do not group into ", d.co);
  d.group = folded / d.co;
  return d;
}

std::array<int64_t, 2> check_spatial_attention(const SpatialAttentionParams& p, Device device) {
  MAGI2_CHECK(p.q.defined() && p.q.dim() == 2, "spatial_attention.q: expected a 2-D tensor");
  const int64_t rows = p.q.size(0), cols = p.q.size(1);
  check_f32_2d(p.q, rows, cols, device, "spatial_attention.q");
  check_f32_2d(p.k, rows, cols, device, "spatial_attention.k");
  check_f32_2d(p.v, rows, cols, device, "spatial_attention.v");
  check_f32_2d(p.o, rows, cols, device, "spatial_attention.o");
  MAGI2_CHECK(p.block_rows >= 1 && rows % p.block_rows == 0, "spatial_attention: ", rows, " rows are not blocks of ",
              p.block_rows);
  return {rows, cols};
}

std::array<int64_t, 2> check_channel_affine(const ChannelAffineParams& p, Device device) {
  MAGI2_CHECK(p.x.defined() && p.x.dim() == 2, "channel_affine.x: expected a 2-D tensor");
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  check_f32_2d(p.x, rows, cols, device, "channel_affine.x");
  check_f32_2d(p.y, rows, cols, device, "channel_affine.y");
  check_f32_vec(p.shift, cols, device, "channel_affine.shift");
  check_f32_vec(p.mul, cols, device, "channel_affine.mul");
  return {rows, cols};
}

}  // namespace magi2
