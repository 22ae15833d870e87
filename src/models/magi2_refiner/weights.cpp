#include "models/magi2_refiner/weights.h"

#include "core/error.h"
#include "models/magi2_dit/strict_bind.h"

namespace magi2 {

namespace {

// Every official tensor of the refiner in module order; `w` may be null (specs only).
void visit_refiner_tensors(const RefinerArch& a, RefinerWeights* w, const TensorVisit& f) {
  const int64_t d = a.hidden_size, hd = a.head_dim, hq = a.num_heads_q(), hk = a.num_heads_kv(), im = a.intermediate();
  const DType F = DType::F32, B = DType::BF16;
  auto p = [&](Tensor RefinerWeights::*m) { return w ? &(w->*m) : nullptr; };
  f("pre_adapter.video_embedder.weight", {d, a.video_in_channels}, F, p(&RefinerWeights::video_embedder_w));
  f("pre_adapter.video_embedder.bias", {d}, F, p(&RefinerWeights::video_embedder_b));
  f("pre_adapter.text_embedder.weight", {d, a.text_in_channels}, F, p(&RefinerWeights::text_embedder_w));
  f("pre_adapter.text_embedder.bias", {d}, F, p(&RefinerWeights::text_embedder_b));
  f("pre_adapter.audio_embedder.weight", {d, a.audio_in_channels}, F, p(&RefinerWeights::audio_embedder_w));
  f("pre_adapter.audio_embedder.bias", {d}, F, p(&RefinerWeights::audio_embedder_b));
  f("pre_adapter.rope.bands", {a.rope_bands()}, F, p(&RefinerWeights::rope_bands));
  for (int l = 0; l < a.num_layers; ++l) {
    RefinerLayerWeights* L = w ? &w->layers[l] : nullptr;
    auto q = [&](Tensor RefinerLayerWeights::*m) { return L ? &(L->*m) : nullptr; };
    const int64_t g = a.is_mm_layer(l) ? 3 : 1;
    const std::string at = "block.layers." + std::to_string(l) + ".attention.";
    f(at + "pre_norm.weight", {g * d}, F, q(&RefinerLayerWeights::attn_pre_norm));
    f(at + "linear_qkv.weight", {g * (hq + 2 * hk) * hd, d}, B, q(&RefinerLayerWeights::linear_qkv));
    f(at + "linear_g.weight", {g * hq, d}, B, q(&RefinerLayerWeights::linear_g));
    f(at + "linear_proj.weight", {g * d, hq * hd}, B, q(&RefinerLayerWeights::linear_proj));
    f(at + "q_norm.weight", {g * hd}, F, q(&RefinerLayerWeights::q_norm));
    f(at + "k_norm.weight", {g * hd}, F, q(&RefinerLayerWeights::k_norm));
    const std::string ml = "block.layers." + std::to_string(l) + ".mlp.";
    f(ml + "pre_norm.weight", {g * d}, F, q(&RefinerLayerWeights::mlp_pre_norm));
    f(ml + "up_gate_proj.weight", {g * 2 * im, d}, B, q(&RefinerLayerWeights::up_gate_proj));
    f(ml + "down_proj.weight", {g * d, im}, B, q(&RefinerLayerWeights::down_proj));
  }
  f("post_adapter.final_norm_video.weight", {d}, F, p(&RefinerWeights::final_norm_video));
  f("post_adapter.final_norm_audio.weight", {d}, F, p(&RefinerWeights::final_norm_audio));
  f("post_adapter.final_linear_video.weight", {a.video_in_channels, d}, F, p(&RefinerWeights::final_linear_video));
  f("post_adapter.final_linear_audio.weight", {a.audio_in_channels, d}, F, p(&RefinerWeights::final_linear_audio));
}

RefinerWeights empty_for(const RefinerArch& arch) {
  RefinerWeights w;
  w.layers.resize(arch.num_layers);
  for (int l = 0; l < arch.num_layers; ++l) w.layers[l].mm = arch.is_mm_layer(l);
  return w;
}

}  // namespace

RefinerWeights RefinerWeights::bind(const Checkpoint& ckpt, const RefinerArch& arch) {
  arch.validate("RefinerWeights::bind");
  RefinerWeights w = empty_for(arch);
  bind_checkpoint_strict(
      ckpt, "refiner", [&](const TensorVisit& f) { visit_refiner_tensors(arch, &w, f); }, &w.num_tensors,
      &w.num_bytes);
  return w;
}

RefinerWeights RefinerWeights::generate(const RefinerArch& arch,
                                        const std::function<Tensor(const std::string&, const Shape&, DType)>& make) {
  arch.validate("RefinerWeights::generate");
  RefinerWeights w = empty_for(arch);
  visit_refiner_tensors(arch, &w, [&](const std::string& name, const Shape& shape, DType dtype, Tensor* dst) {
    *dst = make(name, shape, dtype);
    check_tensor(*dst, shape, dtype, str_cat("generated refiner tensor ", name));
    w.num_tensors += 1;
    w.num_bytes += dst->nbytes();
  });
  return w;
}

std::vector<std::pair<std::string, std::pair<Shape, DType>>> RefinerWeights::specs(const RefinerArch& arch) {
  std::vector<std::pair<std::string, std::pair<Shape, DType>>> out;
  visit_refiner_tensors(arch, nullptr,
                        [&](const std::string& n, const Shape& s, DType t, Tensor*) { out.push_back({n, {s, t}}); });
  return out;
}

}  // namespace magi2

namespace magi2 {

RefinerWeights RefinerWeights::to_backend(const RefinerArch& arch, Backend& be,
                                          const std::function<void(size_t, size_t)>& progress) const {
  RefinerWeights out = *this;
  if (be.device() == Device::CPU) return out;
  std::vector<CopyParams> copies;
  visit_refiner_tensors(arch, &out, [&](const std::string& name, const Shape&, DType, Tensor* t) {
    if (!t || !t->defined() || t->device() == be.device()) return;
    MAGI2_CHECK(t->is_contiguous(), "refiner weights: ", name, " is not contiguous");
    Tensor d;
    try {
      d = be.alloc(t->shape(), t->dtype());
    } catch (const Error& e) {
      throw Error(str_cat("refiner weights: cannot place ", name, " ", shape_str(t->shape()), " on the ", be.name(),
                          " backend: ", e.what()));
    }
    copies.push_back({.src = *t, .dst = d});
    *t = d;
  });
  be.copy_many(copies, progress);
  return out;
}

}  // namespace magi2
