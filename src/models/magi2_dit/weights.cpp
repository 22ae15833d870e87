#include "models/magi2_dit/weights.h"

#include <functional>
#include <map>

#include "core/error.h"
#include "models/magi2_dit/strict_bind.h"
#include "ops/fp8_blocks.h"

namespace magi2 {

namespace {

using Visit = TensorVisit;

// Walks every official tensor of the architecture in module order; `w` may be
// null (specs only). Shapes from spec §2.3-2.7.
void visit_dit_tensors(const DitArch& a, DitWeights* w, const Visit& f, bool fp8 = false) {
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
      // Routed expert banks, with their block scales when FP8 (docs/fp8.md).
      auto bank = [&](const char* n, const Shape& s, Tensor DitLayerWeights::*wm, Tensor DitLayerWeights::*sm) {
        f(ml + n, s, fp8 ? DType::F8E4M3 : B, q(wm));
        if (fp8) f(fp8_scale_name(ml + n), fp8_scale_shape(s), F, q(sm));
      };
      bank("moe_mlp.W_gate", {mh * ne, dh, de}, &DitLayerWeights::w_gate, &DitLayerWeights::w_gate_scale);
      bank("moe_mlp.W_up", {mh * ne, dh, de}, &DitLayerWeights::w_up, &DitLayerWeights::w_up_scale);
      bank("moe_mlp.W_down", {mh * ne, de, dh}, &DitLayerWeights::w_down, &DitLayerWeights::w_down_scale);
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

// Weights with one empty entry per layer of `arch`, each knowing its index and kind.
DitWeights with_layer_kinds(const DitArch& arch) {
  DitWeights w;
  w.layers.resize(arch.num_layers);
  for (int l = 0; l < arch.num_layers; ++l) {
    w.layers[l].index = l;
    w.layers[l].mm = arch.is_mm_layer(l);
    w.layers[l].moe = arch.is_moe_layer(l);
  }
  return w;
}

}  // namespace

ExpertWeights expert_weights_from_name(const std::string& s, const std::string& flag) {
  if (s == "auto") return ExpertWeights::Auto;
  if (s == "bf16") return ExpertWeights::BF16;
  if (s == "fp8-experts") return ExpertWeights::FP8;
  throw Error(str_cat(flag, " must be auto, bf16 or fp8-experts, got '", s, "'"));
}

Fp8Compute fp8_compute_from_name(const std::string& s, const std::string& flag) {
  if (s == "w8a16") return Fp8Compute::W8A16;
  if (s == "w8a8") return Fp8Compute::W8A8;
  throw Error(str_cat(flag, " must be w8a16 or w8a8, got '", s, "'"));
}

bool fp8_from_compute_name(const std::string& s, const std::string& flag) {
  if (s == "bf16") return false;
  if (s == "fp8") return true;
  throw Error(str_cat(flag, " must be bf16 or fp8, got '", s, "'"));
}

bool router_bias_from_ema(const std::string& s, const std::string& flag) {
  if (s == "ema") return true;
  if (s == "main") return false;
  throw Error(str_cat(flag, " must be ema or main, got '", s, "'"));
}

const char* expert_weights_name(ExpertWeights w) {
  switch (w) {
    case ExpertWeights::Auto: return "auto";
    case ExpertWeights::BF16: return "bf16";
    case ExpertWeights::FP8: return "fp8-experts";
  }
  return "?";
}

bool is_routed_expert_weight(const std::string& name) {
  for (const char* bank : {".mlp.moe_mlp.W_gate", ".mlp.moe_mlp.W_up", ".mlp.moe_mlp.W_down"})
    if (name.ends_with(bank)) return true;
  return false;
}

std::vector<DitTensorSpec> dit_tensor_specs(const DitArch& arch, ExpertWeights experts) {
  std::vector<DitTensorSpec> out;
  visit_dit_tensors(
      arch, nullptr, [&](const std::string& n, const Shape& s, DType t, Tensor*) { out.push_back({n, s, t}); },
      experts == ExpertWeights::FP8);
  return out;
}

namespace {

// The routed expert banks of every MoE layer with their scale slots.
template <typename F>
void for_each_bank(DitWeights& w, F&& f) {
  for (DitLayerWeights& L : w.layers) {
    if (!L.moe) continue;
    const std::string pre = str_cat("block.layers.", L.index, ".mlp.moe_mlp.");
    f(pre + "W_gate", L.w_gate, L.w_gate_scale);
    f(pre + "W_up", L.w_up, L.w_up_scale);
    f(pre + "W_down", L.w_down, L.w_down_scale);
  }
}

void recount(DitWeights& w) {
  w.num_tensors = 0;
  w.num_bytes = 0;
  w.for_each_tensor([&](const char*, Tensor& t) {
    if (!t.defined()) return;
    w.num_tensors += 1;
    w.num_bytes += t.nbytes();
  });
}

}  // namespace

void DitWeights::quantize_experts() {
  for_each_bank(*this, [](const std::string& name, Tensor& t, Tensor& scale) {
    if (t.dtype() == DType::F8E4M3) return;
    MAGI2_CHECK(t.device() == Device::CPU, "quantising ", name, " to FP8: the weights must be on the host");
    Fp8Blocks b = quantize_fp8_blocks(t, name);
    t = b.q;
    scale = b.scale_inv;
  });
  recount(*this);
}

void DitWeights::dequantize_experts() {
  for_each_bank(*this, [](const std::string& name, Tensor& t, Tensor& scale) {
    if (t.dtype() != DType::F8E4M3) return;
    MAGI2_CHECK(t.device() == Device::CPU, "dequantising ", name, ": the weights must be on the host");
    t = dequantize_fp8_blocks(t, scale, name);
    scale = Tensor();
  });
  recount(*this);
}

void DitWeights::quantize_linears() {
  for (DitLayerWeights& L : layers)
    for_each_fp8_linear(L, [&](const char* name, Tensor& t, Tensor& scale, int groups) {
      if (!t.defined() || t.dtype() == DType::F8E4M3) return;
      const std::string what = str_cat("layer ", L.index, " ", name);
      MAGI2_CHECK(t.device() == Device::CPU, "quantising ", what, " to FP8: the weights must be on the host");
      MAGI2_CHECK(t.dim() == 2 && t.size(0) % groups == 0, what, ": expected [", groups, " x out, in], got ",
                  shape_str(t.shape()));
      // Per modality: no 128 x 128 block spans two modalities' rows.
      const Shape s3{groups, t.size(0) / groups, t.size(1)};
      Fp8Blocks b = quantize_fp8_blocks(t.reshape(s3), what);
      t = b.q.reshape(t.shape());
      scale = b.scale_inv;
    });
  recount(*this);
}

bool DitWeights::fp8_linears() const {
  for (const DitLayerWeights& L : layers)
    if (L.linear_qkv.defined()) return L.linear_qkv.dtype() == DType::F8E4M3;
  return false;
}

bool DitWeights::fp8_experts() const {
  for (const DitLayerWeights& L : layers)
    if (L.moe) return L.fp8_experts();
  return false;
}

DitWeights DitWeights::generate(const DitArch& arch, const std::function<Tensor(const DitTensorSpec&)>& make,
                                ExpertWeights experts) {
  arch.validate("DitWeights::generate");
  DitWeights w = with_layer_kinds(arch);
  visit_dit_tensors(arch, &w, [&](const std::string& name, const Shape& shape, DType dtype, Tensor* dst) {
    *dst = make({name, shape, dtype});
    check_tensor(*dst, shape, dtype, str_cat("generated DiT tensor ", name));
    MAGI2_CHECK(dst->is_contiguous(), "generated DiT tensor ", name, " is not contiguous");
    w.num_tensors += 1;
    w.num_bytes += dst->nbytes();
  }, experts == ExpertWeights::FP8);
  return w;
}

std::vector<DitLinearShape> dit_fp8_linear_shapes(const DitArch& arch) {
  // The official shapes land in the members they bind, which for_each_fp8_linear then names.
  DitWeights w = with_layer_kinds(arch);
  std::map<const Tensor*, Shape> shapes;
  visit_dit_tensors(arch, &w, [&](const std::string&, const Shape& shape, DType, Tensor* dst) { shapes[dst] = shape; });
  std::vector<DitLinearShape> out;
  for (DitLayerWeights& L : w.layers)
    for_each_fp8_linear(L, [&](const char* name, Tensor& t, Tensor&, int groups) {
      const auto it = shapes.find(&t);
      if (it == shapes.end()) return;  // not in this layer's kind
      out.push_back({L.index, name, it->second[1], it->second[0] / groups});
    });
  return out;
}

DitWeights DitWeights::bind(const Checkpoint& ckpt, const DitArch& arch, ExpertWeights experts) {
  DitWeights w = with_layer_kinds(arch);

  bool stored_fp8 = false;  // FP8 routed experts are recognised by their dtype
  for (const auto& raw : ckpt.names())
    if (is_routed_expert_weight(canonical_tensor_name(raw)) && ckpt.entry(raw).dtype == DType::F8E4M3) stored_fp8 = true;
  bind_checkpoint_strict(
      ckpt, "DiT", [&](const TensorVisit& f) { visit_dit_tensors(arch, &w, f, stored_fp8); }, &w.num_tensors,
      &w.num_bytes);
  if (experts == ExpertWeights::FP8 && !stored_fp8) w.quantize_experts();
  if (experts == ExpertWeights::BF16 && stored_fp8) w.dequantize_experts();
  return w;
}

}  // namespace magi2
