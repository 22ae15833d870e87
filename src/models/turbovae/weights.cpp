// TurboVAE names, strict binding and repack (see weights.h).
#include "models/turbovae/weights.h"

#include <functional>
#include <map>

#include "core/error.h"
#include "ops/ops.h"

namespace magi2 {
namespace {

// Calls conv(prefix, C_out, C_in, kT, kH, kW) for every convolution of the
// decoder in module order (the official TurboVAEDDecoder3d construction: the
// config lists run from the output end, the decoder walks them reversed) and
// assembles the module tree from what it returns. One walk serves the name
// table and the binder, so they cannot disagree.
using ConvFn = std::function<TurboConv(const std::string&, int64_t, int64_t, int64_t, int64_t, int64_t)>;

TurboResBlock res_block(const ConvFn& conv, const std::string& p, int64_t in, int64_t out, bool relu_first) {
  TurboResBlock r;
  r.relu_first = relu_first;
  r.conv1 = conv(p + ".conv1.conv", out, in, 3, 3, 3);
  r.conv2 = conv(p + ".conv2.conv", out, out, 3, 3, 3);
  if (in != out) r.conv_shortcut = conv(p + ".conv_shortcut.conv", out, in, 1, 1, 1);
  return r;
}

TurboVaeWeights walk(const TurboVaeConfig& cfg, const ConvFn& conv) {
  const std::vector<int> ch(cfg.decoder_block_out_channels.rbegin(), cfg.decoder_block_out_channels.rend());
  const std::vector<int> layers(cfg.decoder_layers_per_block.rbegin(), cfg.decoder_layers_per_block.rend());
  const std::vector<bool> scale(cfg.decoder_spatio_temporal_scaling.rbegin(), cfg.decoder_spatio_temporal_scaling.rend());
  const std::vector<bool> only(cfg.decoder_spatio_only.rbegin(), cfg.decoder_spatio_only.rend());
  TurboVaeWeights w;
  w.conv_in = conv("decoder.conv_in.conv", ch[0], cfg.latent_channels, 3, 3, 3);
  for (int i = 0; i < layers[0]; ++i)
    w.mid_block.push_back(res_block(conv, "decoder.mid_block.resnets." + std::to_string(i), ch[0], ch[0], false));
  int64_t width = ch[0];
  for (size_t b = 0; b < ch.size(); ++b) {
    const std::string p = "decoder.up_blocks." + std::to_string(b);
    const int64_t out = ch[b];
    TurboUpBlock ub;
    if (width != out) {
      ub.has_conv_in = true;
      ub.conv_in = res_block(conv, p + ".conv_in", width, out, false);
    }
    if (scale[b]) {
      ub.has_upsampler = true;
      ub.upsampler.temporal = !only[b];
      if (ub.upsampler.temporal) ub.upsampler.time_conv = conv(p + ".upsamplers.0.time_conv.conv", 2 * out, out, 3, 1, 1);
      ub.upsampler.resample = conv(p + ".upsamplers.0.resample.1", out, out, 0, 3, 3);  // kT 0: a Conv2d weight
    }
    for (int i = 0; i < layers[b + 1]; ++i)
      ub.resnets.push_back(res_block(conv, p + ".resnets." + std::to_string(i), out, out, scale[b]));
    w.up_blocks.push_back(std::move(ub));
    width = out;
  }
  w.conv_out = conv("decoder.conv_out.conv", int64_t{cfg.out_channels} * cfg.patch_size * cfg.patch_size, width, 3, 3, 3);
  return w;
}

Shape weight_shape(int64_t co, int64_t ci, int64_t kt, int64_t kh, int64_t kw) {
  return kt == 0 ? Shape{co, ci, kh, kw} : Shape{co, ci, kt, kh, kw};
}

}  // namespace

std::vector<TurboVaeTensorSpec> turbo_vae_tensor_specs(const TurboVaeConfig& cfg) {
  std::vector<TurboVaeTensorSpec> specs;
  walk(cfg, [&](const std::string& p, int64_t co, int64_t ci, int64_t kt, int64_t kh, int64_t kw) {
    specs.push_back({p + ".weight", weight_shape(co, ci, kt, kh, kw)});
    specs.push_back({p + ".bias", {co}});
    return TurboConv{};
  });
  return specs;
}

TurboVaeWeights bind_turbo_vae_weights(const TurboVaeConfig& cfg, const TorchStateDict& sd, DType dtype) {
  MAGI2_CHECK(dtype == DType::BF16 || dtype == DType::F32, "TurboVAE: compute dtype must be bf16 or f32");
  // Official key handling: strip a leading "module."; names are rooted at
  // "decoder."; only when some decoder tensor is missing that way and the
  // first key is not rooted at decoder./encoder. are the names taken as
  // relative to the decoder (the official fallback load).
  std::map<std::string, std::string> by_name;  // name without "module." -> key in sd
  for (const auto& k : sd.names()) by_name.emplace(k.starts_with("module.") ? k.substr(7) : k, k);
  bool rooted = true;
  if (!sd.names().empty()) {
    const std::string& first = sd.names().front();
    const std::string n = first.starts_with("module.") ? first.substr(7) : first;
    bool all_rooted = true;
    for (const auto& s : turbo_vae_tensor_specs(cfg)) all_rooted = all_rooted && by_name.count(s.name);
    rooted = all_rooted || n.starts_with("decoder.") || n.starts_with("encoder.");
  }
  std::string missing, wrong;
  auto find = [&](const std::string& name, const Shape& shape) -> const Tensor* {
    auto it = by_name.find(rooted ? name : name.substr(8));  // 8 = "decoder."
    if (it == by_name.end()) {
      missing += (missing.empty() ? "" : ", ") + name;
      return nullptr;
    }
    const Tensor& t = sd.get(it->second);
    if (t.shape() != shape || !(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16)) {
      wrong += str_cat(wrong.empty() ? "" : ", ", name, " (expected ", shape_str(shape), " float, got ",
                       shape_str(t.shape()), " ", dtype_name(t.dtype()), ")");
      return nullptr;
    }
    return &t;
  };
  TurboVaeWeights w = walk(cfg, [&](const std::string& p, int64_t co, int64_t ci, int64_t kt, int64_t kh, int64_t kw) {
    TurboConv c;
    const Tensor* wt = find(p + ".weight", weight_shape(co, ci, kt, kh, kw));
    const Tensor* bt = find(p + ".bias", {co});
    if (wt) c.w = conv_weight_channels_last(*wt, dtype);
    if (bt) c.b = bt->to(dtype);
    return c;
  });
  MAGI2_CHECK(missing.empty() && wrong.empty(), "TurboVAE checkpoint '", sd.path(), "' does not match the config:",
              missing.empty() ? "" : " missing ", missing, wrong.empty() ? "" : "; wrong shape ", wrong);
  w.dtype = dtype;
  return w;
}

}  // namespace magi2
