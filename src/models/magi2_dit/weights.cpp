#include "models/magi2_dit/weights.h"

#include <cstdlib>
#include <functional>

#include "core/error.h"
#include "models/magi2_dit/strict_bind.h"

namespace magi2 {

namespace {

using Visit = TensorVisit;

// Walks every official tensor of the architecture in module order; `w` may be
// null (specs only). Shapes from spec §2.3-2.7.
void visit_dit_tensors(const DitArch& a, DitWeights* w, const Visit& f) {
  const int64_t d = a.hidden_size, vw = a.virtual_width(), hd = a.head_dim, h = a.num_heads_q();
  const int64_t mh = a.moe_num_heads, ne = a.moe_num_experts, dh = a.moe_head_dim();
  const int64_t de = a.moe_expert_intermediate_size, ish = a.moe_shared_expert_intermediate_size;
  const int64_t im = a.moe_modality_specific_expert_intermediate_size, di = a.dense_intermediate();
  const int64_t nb = a.rope_bands();
  const DType F = DType::F32, B = DType::BF16;
  auto p = [&](Tensor DitWeights::*m) { return w ? &(w->*m) : nullptr; };
  f("pre_adapter.video_embedder.weight", {vw, a.video_in_channels}, F, p(&DitWeights::video_embedder_w));
  f("pre_adapter.video_embedder.bias", {vw}, F, p(&DitWeights::video_embedder_b));
  f("pre_adapter.audio_embedder.weight", {vw, a.audio_in_channels}, F, p(&DitWeights::audio_embedder_w));
  f("pre_adapter.audio_embedder.bias", {vw}, F, p(&DitWeights::audio_embedder_b));
  f("pre_adapter.text_embedder.weight", {vw, a.text_in_channels}, F, p(&DitWeights::text_embedder_w));
  f("pre_adapter.text_embedder.bias", {vw}, F, p(&DitWeights::text_embedder_b));
  f("pre_adapter.rope.bands", {nb}, F, p(&DitWeights::rope_bands));
  for (int l = 0; l < a.num_layers; ++l) {
    DitLayerWeights* L = w ? &w->layers[l] : nullptr;
    auto q = [&](Tensor DitLayerWeights::*m) { return L ? &(L->*m) : nullptr; };
    auto qb = [&](MhcBranchWeights DitLayerWeights::*br, Tensor MhcBranchWeights::*m) {
      return L ? &((L->*br).*m) : nullptr;
    };
    const std::string pre = "block.layers." + std::to_string(l) + ".";
    const bool mm = a.is_mm_layer(l), moe = a.is_moe_layer(l);
    const int64_t g = mm ? 3 : 1;
    for (const char* br : {"attn", "mlp"}) {
      auto B_ = std::string(br) == "attn" ? &DitLayerWeights::mhc_attn : &DitLayerWeights::mhc_mlp;
      f(pre + "mhc_alpha_pre_" + br, {1}, F, qb(B_, &MhcBranchWeights::alpha_pre));
      f(pre + "mhc_alpha_post_" + br, {1}, F, qb(B_, &MhcBranchWeights::alpha_post));
      f(pre + "mhc_alpha_res_" + br, {1}, F, qb(B_, &MhcBranchWeights::alpha_res));
      f(pre + "mhc_bias_pre_" + br, {4}, F, qb(B_, &MhcBranchWeights::bias_pre));
      f(pre + "mhc_bias_post_" + br, {4}, F, qb(B_, &MhcBranchWeights::bias_post));
      f(pre + "mhc_bias_res_" + br, {4, 4}, F, qb(B_, &MhcBranchWeights::bias_res));
    }
    f(pre + "mhc_phi_fused_attn", {vw, 24}, F, q(&DitLayerWeights::phi_attn));
    f(pre + "mhc_phi_fused_mlp", {vw, 24}, F, q(&DitLayerWeights::phi_mlp));
    f(pre + "mhc_norm.weight", {g * vw}, F, q(&DitLayerWeights::mhc_norm));
    const std::string at = pre + "attention.";
    f(at + "pre_norm.weight", {g * d}, F, q(&DitLayerWeights::attn_pre_norm));
    f(at + "linear_g.weight", {g * h, d}, B, q(&DitLayerWeights::linear_g));
    f(at + "linear_qkv.weight", {g * 3 * d, d}, B, q(&DitLayerWeights::linear_qkv));
    f(at + "linear_proj.weight", {g * d, h * hd}, B, q(&DitLayerWeights::linear_proj));
    f(at + "sinks", {a.sink_token_num, h}, F, q(&DitLayerWeights::sinks));
    f(at + "q_norm.weight", {g * hd}, F, q(&DitLayerWeights::q_norm));
    f(at + "k_norm.weight", {g * hd}, F, q(&DitLayerWeights::k_norm));
    const std::string ml = pre + "mlp.";
    f(ml + "pre_norm.weight", {3 * d}, F, q(&DitLayerWeights::mlp_pre_norm));
    if (moe) {
      f(ml + "split_linear.weight", {d, d}, B, q(&DitLayerWeights::split_linear));
      f(ml + "merge_linear.weight", {d, d}, B, q(&DitLayerWeights::merge_linear));
      f(ml + "moe_mlp.gate", {mh * ne, dh}, F, q(&DitLayerWeights::router_gate));
      f(ml + "moe_mlp.W_gate", {mh * ne, dh, de}, B, q(&DitLayerWeights::w_gate));
      f(ml + "moe_mlp.W_up", {mh * ne, dh, de}, B, q(&DitLayerWeights::w_up));
      f(ml + "moe_mlp.W_down", {mh * ne, de, dh}, B, q(&DitLayerWeights::w_down));
      f(ml + "moe_mlp.router.expert_bias", {mh * ne}, F, q(&DitLayerWeights::expert_bias));
      f(ml + "moe_mlp.router.expert_bias_ema", {mh * ne}, F, q(&DitLayerWeights::expert_bias_ema));
      f(ml + "shared_expert_fc1.weight", {2 * ish, d}, B, q(&DitLayerWeights::shared_fc1));
      f(ml + "shared_expert_fc2.weight", {d, ish}, B, q(&DitLayerWeights::shared_fc2));
      f(ml + "modality_specific_shared_expert_fc1.weight", {3 * 2 * im, d}, B, q(&DitLayerWeights::msh_fc1));
      f(ml + "modality_specific_shared_expert_fc2.weight", {3 * d, im}, B, q(&DitLayerWeights::msh_fc2));
    } else {
      f(ml + "up_gate_proj.weight", {3 * 2 * di, d}, B, q(&DitLayerWeights::up_gate_proj));
      f(ml + "down_proj.weight", {3 * d, di}, B, q(&DitLayerWeights::down_proj));
    }
  }
  f("post_adapter.final_norm_video.weight", {vw}, F, p(&DitWeights::final_norm_video));
  f("post_adapter.final_norm_audio.weight", {vw}, F, p(&DitWeights::final_norm_audio));
  f("post_adapter.final_linear_video.weight", {a.video_in_channels, vw}, F, p(&DitWeights::final_linear_video));
  f("post_adapter.final_linear_audio.weight", {a.audio_in_channels, vw}, F, p(&DitWeights::final_linear_audio));
}

}  // namespace

std::vector<DitTensorSpec> dit_tensor_specs(const DitArch& arch) {
  std::vector<DitTensorSpec> out;
  visit_dit_tensors(arch, nullptr, [&](const std::string& n, const Shape& s, DType t, Tensor*) {
    out.push_back({n, s, t});
  });
  return out;
}

DitWeights DitWeights::generate(const DitArch& arch, const std::function<Tensor(const DitTensorSpec&)>& make) {
  arch.validate("DitWeights::generate");
  DitWeights w;
  w.layers.resize(arch.num_layers);
  for (int l = 0; l < arch.num_layers; ++l) {
    w.layers[l].index = l;
    w.layers[l].mm = arch.is_mm_layer(l);
    w.layers[l].moe = arch.is_moe_layer(l);
  }
  visit_dit_tensors(arch, &w, [&](const std::string& name, const Shape& shape, DType dtype, Tensor* dst) {
    *dst = make({name, shape, dtype});
    check_tensor(*dst, shape, dtype, str_cat("generated DiT tensor ", name));
    MAGI2_CHECK(dst->is_contiguous(), "generated DiT tensor ", name, " is not contiguous");
    w.num_tensors += 1;
    w.num_bytes += dst->nbytes();
  });
  return w;
}

DitWeights DitWeights::bind(const Checkpoint& ckpt, const DitArch& arch) {
  DitWeights w;
  w.layers.resize(arch.num_layers);
  for (int l = 0; l < arch.num_layers; ++l) {
    w.layers[l].index = l;
    w.layers[l].mm = arch.is_mm_layer(l);
    w.layers[l].moe = arch.is_moe_layer(l);
  }
  if (const char* src = std::getenv("MAGI2_ROUTER_BIAS_SOURCE")) w.router_bias_from_ema = std::string(src) != "main";

  bind_checkpoint_strict(
      ckpt, "DiT",
      [&](const TensorVisit& f) { visit_dit_tensors(arch, &w, f); }, &w.num_tensors, &w.num_bytes);
  return w;
}

}  // namespace magi2
