// Tiny Wan2.2 VAE checkpoint writer (see tiny.h).
#include "models/wan22_vae/tiny.h"

#include <cmath>

#include "core/seeded_random.h"
#include "core/seeded_tensor.h"
#include "io/torch_zip.h"

namespace magi2 {
namespace {

using Specs = std::vector<std::pair<std::string, Shape>>;

void res_block(Specs& s, const std::string& p, int64_t in, int64_t out) {
  s.push_back({p + "residual.0.gamma", {in, 1, 1, 1}});
  s.push_back({p + "residual.2.weight", {out, in, 3, 3, 3}});
  s.push_back({p + "residual.2.bias", {out}});
  s.push_back({p + "residual.3.gamma", {out, 1, 1, 1}});
  s.push_back({p + "residual.6.weight", {out, out, 3, 3, 3}});
  s.push_back({p + "residual.6.bias", {out}});
  if (in != out) {
    s.push_back({p + "shortcut.weight", {out, in, 1, 1, 1}});
    s.push_back({p + "shortcut.bias", {out}});
  }
}

// middle = ResidualBlock, AttentionBlock, ResidualBlock at width c.
void middle(Specs& s, const std::string& p, int64_t c) {
  res_block(s, p + "middle.0.", c, c);
  s.push_back({p + "middle.1.norm.gamma", {c, 1, 1}});
  s.push_back({p + "middle.1.to_qkv.weight", {3 * c, c, 1, 1}});
  s.push_back({p + "middle.1.to_qkv.bias", {3 * c}});
  s.push_back({p + "middle.1.proj.weight", {c, c, 1, 1}});
  s.push_back({p + "middle.1.proj.bias", {c}});
  res_block(s, p + "middle.2.", c, c);
}

void head(Specs& s, const std::string& p, int64_t c, int64_t out) {
  s.push_back({p + "head.0.gamma", {c, 1, 1, 1}});
  s.push_back({p + "head.2.weight", {out, c, 3, 3, 3}});
  s.push_back({p + "head.2.bias", {out}});
}

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// (mean, std) of a tensor's normal draw (golden meta.json "init" recipe).
std::pair<double, double> recipe(const std::string& name, const Shape& shape) {
  if (ends_with(name, ".gamma")) return {1.0, 0.1};
  if (ends_with(name, ".bias")) return {0.0, 0.05};
  int64_t fan_in = 1;
  for (size_t d = 1; d < shape.size(); ++d) fan_in *= shape[d];
  double g = 1.0;
  if (name.find(".residual.") != std::string::npos) g = 1.2;
  if (ends_with(name, ".proj.weight")) g = 0.5;
  return {0.0, g / std::sqrt(static_cast<double>(fan_in))};
}

}  // namespace

std::vector<std::pair<std::string, Shape>> wan22_vae_tensor_specs(const Wan22VaeLayout& l) {
  MAGI2_CHECK(!l.dim_mult.empty() && l.dim >= 1 && l.dec_dim >= 1 && l.z_dim >= 1 && l.num_res_blocks >= 1,
              "Wan2.2 VAE layout: empty dim_mult or non-positive width");
  for (int64_t m : l.dim_mult) MAGI2_CHECK(m >= 1, "Wan2.2 VAE layout: dim_mult entries must be >= 1");
  const size_t stages = l.dim_mult.size();
  Specs s;
  // Encoder3d(dim, 2*z_dim, ...): dims = dim * [1] + dim_mult.
  std::vector<int64_t> dims = {l.dim};
  for (int64_t m : l.dim_mult) dims.push_back(l.dim * m);
  s.push_back({"encoder.conv1.weight", {dims[0], 12, 3, 3, 3}});
  s.push_back({"encoder.conv1.bias", {dims[0]}});
  for (size_t i = 0; i < stages; ++i) {
    const std::string p = "encoder.downsamples." + std::to_string(i) + ".downsamples.";
    int64_t in = dims[i];
    for (int j = 0; j < l.num_res_blocks; ++j, in = dims[i + 1])
      res_block(s, p + std::to_string(j) + ".", in, dims[i + 1]);
    if (i + 1 != stages) {  // Resample downsample2d / downsample3d
      const int64_t c = dims[i + 1];
      const std::string r = p + std::to_string(l.num_res_blocks) + ".";
      s.push_back({r + "resample.1.weight", {c, c, 3, 3}});
      s.push_back({r + "resample.1.bias", {c}});
      if (i < l.temporal_downsample.size() && l.temporal_downsample[i]) {
        s.push_back({r + "time_conv.weight", {c, c, 3, 1, 1}});
        s.push_back({r + "time_conv.bias", {c}});
      }
    }
  }
  middle(s, "encoder.", dims.back());
  head(s, "encoder.", dims.back(), 2 * l.z_dim);
  s.push_back({"conv1.weight", {2 * l.z_dim, 2 * l.z_dim, 1, 1, 1}});
  s.push_back({"conv1.bias", {2 * l.z_dim}});
  s.push_back({"conv2.weight", {l.z_dim, l.z_dim, 1, 1, 1}});
  s.push_back({"conv2.bias", {l.z_dim}});
  // Decoder3d(dec_dim, z_dim, ..., temporal_upsample = reversed flags):
  // dims = dec_dim * ([dim_mult[-1]] + reversed(dim_mult)), num_res_blocks + 1 blocks per stage.
  std::vector<int64_t> dd = {l.dec_dim * l.dim_mult.back()};
  for (size_t i = stages; i-- > 0;) dd.push_back(l.dec_dim * l.dim_mult[i]);
  const std::vector<bool> up(l.temporal_downsample.rbegin(), l.temporal_downsample.rend());
  s.push_back({"decoder.conv1.weight", {dd[0], l.z_dim, 3, 3, 3}});
  s.push_back({"decoder.conv1.bias", {dd[0]}});
  middle(s, "decoder.", dd[0]);
  for (size_t i = 0; i < stages; ++i) {
    const std::string p = "decoder.upsamples." + std::to_string(i) + ".upsamples.";
    int64_t in = dd[i];
    for (int j = 0; j <= l.num_res_blocks; ++j, in = dd[i + 1]) res_block(s, p + std::to_string(j) + ".", in, dd[i + 1]);
    if (i + 1 != stages) {  // Resample upsample2d / upsample3d
      const int64_t c = dd[i + 1];
      const std::string r = p + std::to_string(l.num_res_blocks + 1) + ".";
      s.push_back({r + "resample.1.weight", {c, c, 3, 3}});
      s.push_back({r + "resample.1.bias", {c}});
      if (i < up.size() && up[i]) {
        s.push_back({r + "time_conv.weight", {2 * c, c, 3, 1, 1}});
        s.push_back({r + "time_conv.bias", {2 * c}});
      }
    }
  }
  head(s, "decoder.", dd.back(), 12);
  return s;
}

void write_tiny_wan22_vae(const std::string& path, uint64_t seed, const Wan22VaeLayout& layout) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, shape] : wan22_vae_tensor_specs(layout)) {
    // Plain copies: clang 14 cannot capture structured bindings in the lambda below.
    const auto r = recipe(name, shape);
    const double mean = r.first, sd = r.second;
    const uint64_t key = fnv1a(name) ^ seed;
    Tensor t = seeded_tensor(shape, DType::F32, [&](uint64_t i) {
      // Box-Muller, one normal per element (cosine branch) from two uniforms.
      const double u1 = unit_uniform(key, 2 * i), u2 = unit_uniform(key, 2 * i + 1);
      return mean + sd * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    });
    tensors.emplace_back(name, std::move(t));
  }
  write_torch_checkpoint(path, tensors);
}

}  // namespace magi2
