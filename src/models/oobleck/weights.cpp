#include "models/oobleck/weights.h"

#include <cmath>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/mismatch_report.h"
#include "io/safetensors.h"

namespace magi2 {

namespace {

// Appends the tensors of the official module tree (sa_audio_vae.py) in order.
struct SpecWriter {
  std::vector<SaoTensorSpec>& out;
  bool snake;

  void conv(const std::string& p, int64_t cin, int64_t cout, int64_t k, bool bias = true) {
    out.push_back({p + "weight_g", {cout, 1, 1}});
    out.push_back({p + "weight_v", {cout, cin, k}});
    if (bias) out.push_back({p + "bias", {cout}});
  }
  // Transposed conv: weight [in, out, k]; weight norm along dim 0 = input channels.
  void conv_t(const std::string& p, int64_t cin, int64_t cout, int64_t k) {
    out.push_back({p + "weight_g", {cin, 1, 1}});
    out.push_back({p + "weight_v", {cin, cout, k}});
    out.push_back({p + "bias", {cout}});
  }
  void act(const std::string& p, int64_t c) {
    if (!snake) return;  // ELU has no parameters
    out.push_back({p + "alpha", {c}});
    out.push_back({p + "beta", {c}});
  }
  void residual_unit(const std::string& p, int64_t c) {
    act(p + "layers.0.", c);
    conv(p + "layers.1.", c, c, 7);
    act(p + "layers.2.", c);
    conv(p + "layers.3.", c, c, 1);
  }
};

std::string layer(const std::string& prefix, size_t i) { return prefix + "layers." + std::to_string(i) + "."; }

// Folds weight norm: w = v * (g / ||v_s||) for each slice s of v along dim 0
// (the fused torch kernel's order: norm, then g / norm, then the product, in
// fp32; the norm's sum of squares is taken in float64 and rounded once). The
// result is permuted to the op layout [K, Cin, Cout]; `transposed` says v is
// [Cin, Cout, K] (ConvTranspose1d) rather than [Cout, Cin, K].
Tensor fold_weight_norm(const Tensor& v, const Tensor& g, bool transposed) {
  const int64_t d0 = v.size(0), d1 = v.size(1), k = v.size(2);
  const float* pv = v.data_as<float>();
  const float* pg = g.data_as<float>();
  const int64_t cin = transposed ? d0 : d1, cout = transposed ? d1 : d0;
  Tensor w = Tensor::empty({k, cin, cout}, DType::F32);
  float* pw = w.data_as<float>();
  for (int64_t s = 0; s < d0; ++s) {
    double ss = 0;
    for (int64_t e = 0; e < d1 * k; ++e) ss += static_cast<double>(pv[s * d1 * k + e]) * pv[s * d1 * k + e];
    const float scale = pg[s] / static_cast<float>(std::sqrt(ss));
    for (int64_t j = 0; j < d1; ++j)
      for (int64_t t = 0; t < k; ++t) {
        const float val = pv[(s * d1 + j) * k + t] * scale;
        const int64_t i = transposed ? s : j, o = transposed ? j : s;
        pw[(t * cin + i) * cout + o] = val;
      }
  }
  return w;
}

// Reads bound tensors by name (all present and shape-checked beforehand).
struct Binder {
  const SafetensorsFile& file;
  size_t count = 0;

  Tensor f32(const std::string& name) {
    ++count;
    Tensor t = file.tensor(name);
    return t.dtype() == DType::F32 ? t : t.to(DType::F32);
  }
  OobleckSnake snake(const std::string& p) { return {f32(p + "alpha"), f32(p + "beta")}; }
  OobleckConv conv(const std::string& p, bool transposed, bool bias, int64_t stride, int64_t padding,
                   int64_t dilation) {
    OobleckConv c;
    c.w = fold_weight_norm(f32(p + "weight_v"), f32(p + "weight_g"), transposed);
    if (bias) c.bias = f32(p + "bias");
    c.stride = stride;
    c.padding = padding;
    c.dilation = dilation;
    return c;
  }
};

constexpr int64_t kDilations[3] = {1, 3, 9};

}  // namespace

std::vector<SaoTensorSpec> sao_vae_tensor_specs(const SaoVaeConfig& c) {
  std::vector<SaoTensorSpec> out;
  const OobleckCodecConfig& e = c.encoder;
  const size_t ne = e.c_mults.size();
  const std::string ep = std::string(kSaoVaePrefix) + "encoder.";
  SpecWriter enc{out, e.use_snake};
  enc.conv(layer(ep, 0), e.io_channels, e.width(0), 7);
  for (size_t i = 0; i < ne; ++i) {
    const std::string b = layer(ep, i + 1);
    for (size_t r = 0; r < 3; ++r) enc.residual_unit(layer(b, r), e.width(i));
    enc.act(layer(b, 3), e.width(i));
    enc.conv(layer(b, 4), e.width(i), e.width(i + 1), 2 * e.strides[i]);
  }
  enc.act(layer(ep, ne + 1), e.width(ne));
  enc.conv(layer(ep, ne + 2), e.width(ne), e.latent_dim, 3);

  const OobleckCodecConfig& d = c.decoder;
  const size_t nd = d.c_mults.size();
  const std::string dp = std::string(kSaoVaePrefix) + "decoder.";
  SpecWriter dec{out, d.use_snake};
  dec.conv(layer(dp, 0), d.latent_dim, d.width(nd), 7);
  for (size_t i = nd, l = 1; i >= 1; --i, ++l) {
    const std::string b = layer(dp, l);
    dec.act(layer(b, 0), d.width(i));
    dec.conv_t(layer(b, 1), d.width(i), d.width(i - 1), 2 * d.strides[i - 1]);
    for (size_t r = 0; r < 3; ++r) dec.residual_unit(layer(b, r + 2), d.width(i - 1));
  }
  dec.act(layer(dp, nd + 1), d.width(0));
  dec.conv(layer(dp, nd + 2), d.width(0), d.io_channels, 7, /*bias=*/false);
  return out;
}

OobleckDecoderWeights OobleckDecoderWeights::load(const std::string& path, const SaoVaeConfig& c) {
  auto file = SafetensorsFile::open(path);
  const std::string prefix = kSaoVaePrefix;
  std::map<std::string, Shape> expected;
  for (const SaoTensorSpec& s : sao_vae_tensor_specs(c)) expected.emplace(s.name, s.shape);
  std::vector<std::string> missing, unexpected, wrong;
  size_t found = 0;
  for (const SafetensorsEntry& e : file->entries()) {
    if (e.name.rfind(prefix, 0) != 0) continue;  // the diffusion model and conditioners
    auto it = expected.find(e.name);
    if (it == expected.end()) {
      unexpected.push_back(e.name);
      continue;
    }
    ++found;
    if (e.shape != it->second)
      wrong.push_back(str_cat(e.name, " (expected ", shape_str(it->second), ", got ", shape_str(e.shape), ")"));
    else if (e.dtype != DType::F32 && e.dtype != DType::F16 && e.dtype != DType::BF16)
      wrong.push_back(str_cat(e.name, " (dtype ", dtype_name(e.dtype), " is not a float type)"));
  }
  if (found != expected.size())
    for (const auto& [name, shape] : expected)
      if (!file->contains(name)) missing.push_back(name);
  throw_if_mismatch(str_cat("checkpoint '", path, "' does not match the Stable Audio Open VAE of '", c.source, "':"),
                    missing, unexpected, wrong, {}, 6);

  const OobleckCodecConfig& d = c.decoder;
  const size_t nd = d.c_mults.size();
  const std::string dp = prefix + "decoder.";
  Binder b{*file};
  OobleckDecoderWeights w;
  w.conv_in = b.conv(layer(dp, 0), false, true, 1, 3, 1);
  for (size_t i = nd, l = 1; i >= 1; --i, ++l) {
    const std::string p = layer(dp, l);
    const int64_t s = d.strides[i - 1];
    OobleckDecoderBlock blk;
    blk.snake = b.snake(layer(p, 0));
    blk.upsample = b.conv(layer(p, 1), true, true, s, (s + 1) / 2, 1);
    for (size_t r = 0; r < 3; ++r) {
      const std::string u = layer(p, r + 2);
      OobleckResidualUnit& ru = blk.res[r];
      ru.snake1 = b.snake(layer(u, 0));
      ru.conv1 = b.conv(layer(u, 1), false, true, 1, 3 * kDilations[r], kDilations[r]);
      ru.snake2 = b.snake(layer(u, 2));
      ru.conv2 = b.conv(layer(u, 3), false, true, 1, 0, 1);
    }
    w.blocks.push_back(std::move(blk));
  }
  w.snake_out = b.snake(layer(dp, nd + 1));
  w.conv_out = b.conv(layer(dp, nd + 2), false, false, 1, 3, 1);
  w.num_tensors = b.count;
  return w;
}

}  // namespace magi2
