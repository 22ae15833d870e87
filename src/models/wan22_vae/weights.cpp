// Strict, shape-driven binding of the Wan2.2 VAE encoder (see weights.h).
#include "models/wan22_vae/weights.h"

#include <cstring>
#include <set>
#include <sstream>

#include "core/mismatch_report.h"
#include "io/torch_zip.h"
#include "ops/ops.h"

namespace magi2 {
namespace {

// Collects every problem so that one Error lists them all.
class Binder {
 public:
  explicit Binder(const TorchStateDict& sd) : sd_(sd) {}

  bool has(const std::string& name) const { return sd_.contains(name); }
  /// Dimension d of a stored tensor, or 0 when absent / too few dimensions.
  int64_t dim_of(const std::string& name, int d) const {
    if (!has(name)) return 0;
    const Tensor& t = sd_.get(name);
    return t.dim() > d ? t.shape()[d] : 0;
  }

  /// The tensor as contiguous f32 (the official loader's `.to(float32)`), or
  /// undefined after recording a missing / wrong-shape / non-float entry.
  Tensor take(const std::string& name, const Shape& shape) {
    if (!has(name)) {
      missing_.push_back(name);
      return {};
    }
    used_.insert(name);
    const Tensor& t = sd_.get(name);
    if (t.shape() != shape) {
      wrong_.push_back(str_cat(name, " (expected ", shape_str(shape), ", got ", shape_str(t.shape()), ")"));
      return {};
    }
    if (t.dtype() != DType::F32 && t.dtype() != DType::BF16 && t.dtype() != DType::F16) {
      wrong_.push_back(str_cat(name, " (dtype ", dtype_name(t.dtype()), " is not a float type)"));
      return {};
    }
    return t.dtype() == DType::F32 && t.is_contiguous() ? t : t.to(DType::F32);
  }

  /// A causal 3^3 conv weight [out, in, 3, 3, 3] reduced to its last temporal
  /// tap, in the conv op's layout [out, 1, 3, 3, in]: a single frame is
  /// preceded by two zero frames (first chunk of the cached encoder), so the
  /// other taps only ever multiply zeros.
  Tensor take_causal_frame(const std::string& name, int64_t out, int64_t in) {
    Tensor t = take(name, {out, in, 3, 3, 3});
    if (!t.defined()) return t;
    Tensor f = Tensor::empty({out, in, 1, 3, 3}, DType::F32);
    const float* s = t.data_as<float>();
    float* d = f.data_as<float>();
    for (int64_t i = 0; i < out * in; ++i) std::memcpy(d + i * 9, s + i * 27 + 18, 9 * sizeof(float));
    return conv_weight_channels_last(f, DType::F32);
  }

  Tensor take_vec(const std::string& name, Shape stored) {
    Tensor t = take(name, stored);
    return t.defined() ? t.reshape({t.numel()}) : t;
  }

  void finish() const {
    std::vector<std::string> unexpected;
    for (const auto& n : sd_.names()) {
      const bool ours = n.rfind("encoder.", 0) == 0 || n.rfind("conv1.", 0) == 0;
      const bool ignored = n.rfind("decoder.", 0) == 0 || n.rfind("conv2.", 0) == 0;
      if ((ours && !used_.count(n)) || (!ours && !ignored)) unexpected.push_back(n);
    }
    throw_if_mismatch(str_cat("checkpoint '", sd_.path(), "' is not a Wan2.2 VAE state dict:"), missing_, unexpected,
                      wrong_);
  }

 private:
  const TorchStateDict& sd_;
  std::set<std::string> used_;
  std::vector<std::string> missing_, wrong_;
};

Wan22ResBlock bind_res_block(Binder& b, const std::string& p, int64_t in) {
  Wan22ResBlock r;
  r.in_dim = in;
  r.out_dim = b.dim_of(p + "residual.2.weight", 0);
  if (r.out_dim < 1) r.out_dim = in;  // reported as missing below
  const int64_t out = r.out_dim;
  r.gamma0 = b.take_vec(p + "residual.0.gamma", {in, 1, 1, 1});
  r.conv0_w = b.take_causal_frame(p + "residual.2.weight", out, in);
  r.conv0_b = b.take(p + "residual.2.bias", {out});
  r.gamma1 = b.take_vec(p + "residual.3.gamma", {out, 1, 1, 1});
  r.conv1_w = b.take_causal_frame(p + "residual.6.weight", out, out);
  r.conv1_b = b.take(p + "residual.6.bias", {out});
  if (in != out) {
    Tensor w = b.take(p + "shortcut.weight", {out, in, 1, 1, 1});
    if (w.defined()) r.shortcut_w = w.reshape({out, in});
    r.shortcut_b = b.take(p + "shortcut.bias", {out});
  }
  return r;
}

}  // namespace

Wan22EncoderWeights Wan22EncoderWeights::bind(const TorchStateDict& sd) {
  Binder b(sd);
  Wan22EncoderWeights w;
  w.dim = b.dim_of("encoder.conv1.weight", 0);
  MAGI2_CHECK(w.dim >= 1, "checkpoint '", sd.path(), "' is not a Wan2.2 VAE state dict: encoder.conv1.weight missing");
  w.conv1_w = b.take_causal_frame("encoder.conv1.weight", w.dim, 12);
  w.conv1_b = b.take("encoder.conv1.bias", {w.dim});

  int64_t width = w.dim;
  for (int i = 0; b.has(str_cat("encoder.downsamples.", i, ".downsamples.0.residual.2.weight")); ++i) {
    const std::string stage = str_cat("encoder.downsamples.", i, ".downsamples.");
    Wan22DownBlock d;
    d.in_dim = width;
    int n = 0;
    for (; b.has(str_cat(stage, n, ".residual.2.weight")); ++n) {
      d.res.push_back(bind_res_block(b, str_cat(stage, n, "."), width));
      width = d.res.back().out_dim;
    }
    d.out_dim = width;
    const std::string rs = str_cat(stage, n, ".");
    d.spatial_down = b.has(rs + "resample.1.weight");
    d.temporal_down = b.has(rs + "time_conv.weight");
    if (d.spatial_down) {
      Tensor rw = b.take(rs + "resample.1.weight", {width, width, 3, 3});
      if (rw.defined()) d.resample_w = conv_weight_channels_last(rw, DType::F32);
      d.resample_b = b.take(rs + "resample.1.bias", {width});
    }
    if (d.temporal_down) {
      // Checked for strictness only: a single frame skips time_conv (the
      // resampler's first-chunk path just caches its input).
      b.take(rs + "time_conv.weight", {width, width, 3, 1, 1});
      b.take(rs + "time_conv.bias", {width});
    }
    w.down.push_back(std::move(d));
  }
  MAGI2_CHECK(!w.down.empty(), "checkpoint '", sd.path(),
              "' is not a Wan2.2 VAE state dict: no encoder.downsamples.0.downsamples.0 block");

  const int64_t c = width;
  w.mid0 = bind_res_block(b, "encoder.middle.0.", c);
  w.attn_gamma = b.take_vec("encoder.middle.1.norm.gamma", {c, 1, 1});
  Tensor qkv = b.take("encoder.middle.1.to_qkv.weight", {3 * c, c, 1, 1});
  if (qkv.defined()) w.attn_qkv_w = qkv.reshape({3 * c, c});
  w.attn_qkv_b = b.take("encoder.middle.1.to_qkv.bias", {3 * c});
  Tensor proj = b.take("encoder.middle.1.proj.weight", {c, c, 1, 1});
  if (proj.defined()) w.attn_proj_w = proj.reshape({c, c});
  w.attn_proj_b = b.take("encoder.middle.1.proj.bias", {c});
  w.mid2 = bind_res_block(b, "encoder.middle.2.", c);

  const int64_t z2 = b.dim_of("encoder.head.2.weight", 0);
  MAGI2_CHECK(z2 >= 2 && z2 % 2 == 0, "checkpoint '", sd.path(),
              "' is not a Wan2.2 VAE state dict: encoder.head.2.weight missing or odd width");
  w.z_dim = z2 / 2;
  w.head_gamma = b.take_vec("encoder.head.0.gamma", {c, 1, 1, 1});
  w.head_w = b.take_causal_frame("encoder.head.2.weight", z2, c);
  w.head_b = b.take("encoder.head.2.bias", {z2});
  Tensor q = b.take("conv1.weight", {z2, z2, 1, 1, 1});
  if (q.defined()) w.quant_w = q.reshape({z2, z2});
  w.quant_b = b.take("conv1.bias", {z2});
  b.finish();
  return w;
}

Wan22EncoderWeights Wan22EncoderWeights::load(const std::string& path) {
  const TorchStateDict sd = load_torch_checkpoint(path);
  return bind(sd);
}

}  // namespace magi2
