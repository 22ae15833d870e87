// Wan2.2 VAE encoder forward for one frame (see encoder.h). Reads top-down as
// the official module tree: conv1 -> downsamples[i] -> middle -> head -> conv1
// (top level) -> normalisation.
#include "models/wan22_vae/encoder.h"

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "models/wan22_vae/latent_stats.h"

namespace magi2 {
namespace {

// [T, H, W, C] activations viewed as rows of C channels.
Tensor rows_of(const Tensor& x) { return x.reshape({x.numel() / x.size(-1), x.size(-1)}); }

// One-frame conv with a [Co, 1, kh, kw, Ci] kernel on channels-last x [1, H, W, Ci].
Tensor conv_frame(Backend& be, const Tensor& x, const Tensor& w, const Tensor& b, int stride,
                  std::array<int, 4> pad /* top, bottom, left, right */) {
  const int64_t H = x.size(1), W = x.size(2), co = w.size(0), kh = w.size(2), kw = w.size(3);
  const int64_t ho = (H + pad[0] + pad[1] - kh) / stride + 1, wo = (W + pad[2] + pad[3] - kw) / stride + 1;
  Tensor y = be.alloc({1, ho, wo, co}, DType::F32);
  Conv3dParams p;
  p.x = x;
  p.w = w;
  p.bias = b;
  p.y = y;
  p.stride = {1, stride, stride};
  p.pad_front = {0, pad[0], pad[2]};
  p.pad_back = {0, pad[1], pad[3]};
  be.conv3d(p);
  return y;
}

// 3x3 "same" conv of the causal 3^3 kernels on one frame (spatial padding 1).
Tensor conv3x3(Backend& be, const Tensor& x, const Tensor& w, const Tensor& b) {
  return conv_frame(be, x, w, b, 1, {1, 1, 1, 1});
}

Tensor l2_norm(Backend& be, const Tensor& x, const Tensor& gamma, bool silu) {
  Tensor y = be.alloc(x.shape(), DType::F32);
  ChannelL2NormParams p;
  p.x = rows_of(x);
  p.gamma = gamma;
  p.y = rows_of(y);
  p.silu = silu;
  be.channel_l2_norm(p);
  return y;
}

// 1x1 conv (+ bias) as a row linear: [.., Ci] -> [.., Co].
Tensor pointwise(Backend& be, const Tensor& x, const Tensor& w, const Tensor& b) {
  Shape s = x.shape();
  s.back() = w.size(0);
  Tensor y = be.alloc(s, DType::F32);
  LinearParams p;
  p.x = rows_of(x);
  p.w = w;
  p.bias = b;
  p.y = rows_of(y);
  p.groups = Groups::single(p.x.size(0));
  be.linear(p);
  return y;
}

void add_into(Backend& be, const Tensor& acc, const Tensor& other) {
  AddParams p;
  p.a = rows_of(acc);
  p.b = rows_of(other);
  p.out = p.a;
  be.add(p);
}

// Hands an intermediate to the caller's dump hook, if any.
void emit(Backend& be, const Wan22DumpFn& dump, const std::string& name, const Tensor& x) {
  if (dump) dump(name, to_host(be, x));
}

}  // namespace

Wan22Encoder::Wan22Encoder(const Wan22EncoderWeights& w, Backend& be) : w_(w), be_(be) {
  std::vector<Tensor*> ts{&w_.conv1_w,    &w_.conv1_b,     &w_.attn_gamma, &w_.attn_qkv_w, &w_.attn_qkv_b,
                          &w_.attn_proj_w, &w_.attn_proj_b, &w_.head_gamma, &w_.head_w,     &w_.head_b,
                          &w_.quant_w,     &w_.quant_b};
  auto res = [&ts](Wan22ResBlock& r) {
    ts.insert(ts.end(), {&r.gamma0, &r.conv0_w, &r.conv0_b, &r.gamma1, &r.conv1_w, &r.conv1_b, &r.shortcut_w,
                         &r.shortcut_b});
  };
  for (Wan22DownBlock& d : w_.down) {
    for (Wan22ResBlock& r : d.res) res(r);
    ts.insert(ts.end(), {&d.resample_w, &d.resample_b});
  }
  res(w_.mid0);
  res(w_.mid2);
  to_backend_in_place(be, ts, "Wan2.2 encoder weights");
}

int64_t Wan22Encoder::spatial_stride() const {
  int64_t s = 2;  // patchify
  for (const auto& d : w_.down) s *= d.spatial_down ? 2 : 1;
  return s;
}

Tensor Wan22Encoder::res_block(const Wan22ResBlock& r, const Tensor& x) const {
  const Tensor h = r.shortcut_w.defined() ? pointwise(be_, x, r.shortcut_w, r.shortcut_b) : x;
  Tensor t = l2_norm(be_, x, r.gamma0, /*silu=*/true);
  t = conv3x3(be_, t, r.conv0_w, r.conv0_b);
  t = l2_norm(be_, t, r.gamma1, /*silu=*/true);
  t = conv3x3(be_, t, r.conv1_w, r.conv1_b);  // dropout is inactive at inference
  add_into(be_, t, h);
  return t;
}

Tensor Wan22Encoder::attention_block(const Tensor& x) const {
  const int64_t c = x.size(3), positions = x.size(1) * x.size(2);
  Tensor n = l2_norm(be_, x, w_.attn_gamma, /*silu=*/false);
  Tensor qkv = pointwise(be_, n, w_.attn_qkv_w, w_.attn_qkv_b);  // [1, H, W, 3C]: q | k | v
  Tensor o = be_.alloc(x.shape(), DType::F32);
  const Tensor qkv_rows = rows_of(qkv);
  SpatialAttentionParams a;
  a.q = qkv_rows.slice_cols(0, c);
  a.k = qkv_rows.slice_cols(c, 2 * c);
  a.v = qkv_rows.slice_cols(2 * c, 3 * c);
  a.o = rows_of(o);
  a.block_rows = positions;  // one frame: attention over its H*W positions
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c)));
  be_.spatial_attention(a);
  Tensor y = pointwise(be_, o, w_.attn_proj_w, w_.attn_proj_b);
  add_into(be_, y, x);
  return y;
}

Tensor Wan22Encoder::encode(const Tensor& pixels, const Wan22DumpFn& dump) const {
  const int64_t s = spatial_stride();
  MAGI2_CHECK(pixels.dtype() == DType::F32 && pixels.dim() == 3 && pixels.size(0) == 3 && pixels.is_contiguous() &&
                  pixels.size(1) % s == 0 && pixels.size(2) % s == 0 && pixels.size(1) > 0 && pixels.size(2) > 0,
              "Wan2.2 encoder: expected contiguous f32 pixels [3, H, W] with H, W multiples of ", s, ", got ",
              shape_str(pixels.shape()));
  // Model boundary: 2x2 patchify into channels-last [1, H/2, W/2, 12] with
  // channel 4*c + 2*dx + dy (official rearrange "c (h q) (w r) -> (c r q)").
  const int64_t H = pixels.size(1), W = pixels.size(2), h2 = H / 2, w2 = W / 2;
  Tensor host = Tensor::empty({1, h2, w2, 12}, DType::F32);
  const float* px = pixels.data_as<float>();
  float* pt = host.data_as<float>();
  for (int64_t y = 0; y < h2; ++y)
    for (int64_t x = 0; x < w2; ++x)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t dx = 0; dx < 2; ++dx)
          for (int64_t dy = 0; dy < 2; ++dy)
            pt[(y * w2 + x) * 12 + 4 * c + 2 * dx + dy] = px[(c * H + 2 * y + dy) * W + 2 * x + dx];
  // The boundary conversions (patchify here, the final transpose below) run on the host.
  Tensor x = to_backend(be_, host);

  x = conv3x3(be_, x, w_.conv1_w, w_.conv1_b);
  emit(be_, dump, "enc_conv1", x);

  for (size_t i = 0; i < w_.down.size(); ++i) {
    const Wan22DownBlock& d = w_.down[i];
    const Tensor block_in = x;
    for (const auto& r : d.res) x = res_block(r, x);
    // downsample2d / downsample3d: the 2-D part only (first chunk skips time_conv).
    if (d.spatial_down) x = conv_frame(be_, x, d.resample_w, d.resample_b, 2, {0, 1, 0, 1});
    AvgDown3dParams a;
    a.x = block_in;
    a.y = be_.alloc(x.shape(), DType::F32);
    a.factor_t = d.temporal_down ? 2 : 1;
    a.factor_s = d.spatial_down ? 2 : 1;
    be_.avg_down3d(a);
    add_into(be_, x, a.y);
    emit(be_, dump, "enc_down" + std::to_string(i), x);
  }

  x = res_block(w_.mid0, x);
  emit(be_, dump, "enc_mid0", x);
  x = attention_block(x);
  emit(be_, dump, "enc_mid1", x);
  x = res_block(w_.mid2, x);
  emit(be_, dump, "enc_mid2", x);

  x = l2_norm(be_, x, w_.head_gamma, /*silu=*/true);
  x = conv3x3(be_, x, w_.head_w, w_.head_b);
  emit(be_, dump, "enc_head", x);
  Tensor mu_logvar = pointwise(be_, x, w_.quant_w, w_.quant_b);
  emit(be_, dump, "mu_logvar", mu_logvar);

  // latent = (mu - mean) * (1 / std), with 1/std in fp32 as the official.
  const int64_t z = w_.z_dim;
  MAGI2_CHECK(z == kWan22LatentChannels, "Wan2.2 encoder: latent statistics exist for ", kWan22LatentChannels,
              " channels, the checkpoint has ", z);
  std::vector<float> inv_std(z);
  for (int64_t c = 0; c < z; ++c) inv_std[c] = 1.0f / kWan22LatentStd[c];
  const Tensor mean =
      to_backend(be_, Tensor::from_f32({z}, std::vector<float>(kWan22LatentMean.begin(), kWan22LatentMean.end())));
  Tensor latent = be_.alloc({1, mu_logvar.size(1), mu_logvar.size(2), z}, DType::F32);
  ChannelAffineParams n;
  n.x = rows_of(mu_logvar).slice_cols(0, z);
  n.shift = mean;
  n.mul = to_backend(be_, Tensor::from_f32({z}, inv_std));
  n.y = rows_of(latent);
  be_.channel_affine(n);
  emit(be_, dump, "latent", latent);

  // Model boundary: channels-last [1, h, w, z] -> [z, 1, h, w].
  const int64_t hl = latent.size(1), wl = latent.size(2);
  Tensor out = Tensor::empty({z, 1, hl, wl}, DType::F32);
  const Tensor lh = to_host(be_, latent);
  const float* l = lh.data_as<float>();
  float* o = out.data_as<float>();
  for (int64_t p = 0; p < hl * wl; ++p)
    for (int64_t c = 0; c < z; ++c) o[c * hl * wl + p] = l[p * z + c];
  return out;
}

}  // namespace magi2
