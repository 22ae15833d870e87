// DiT weights bound by official tensor name (spec magi2-dit.md §2; official
// module tree of inference/model/magi2_preview.py `Transformer`).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "models/magi2_dit/config.h"
#include "ops/ops.h"

namespace magi2 {

/// How the routed expert banks (moe_mlp.W_gate, W_up, W_down) are held
/// (docs/fp8.md). Everything else is always in its parameter dtype.
enum class ExpertWeights {
  Auto,  ///< as the checkpoint stores them (bf16, or F8_E4M3 + `_scale_inv`)
  BF16,  ///< bf16 (an FP8 checkpoint is dequantised at load: bf16(q * scale_inv))
  FP8,   ///< e4m3 with 128 x 128 block scales (a bf16 checkpoint is quantised at load)
};

/// Parses the `--weights` value: "auto", "bf16" or "fp8-experts". Error naming
/// `flag` and the value otherwise.
ExpertWeights expert_weights_from_name(const std::string& s, const std::string& flag);
/// The `--weights` spelling of a format.
const char* expert_weights_name(ExpertWeights w);

/// Parses the `--router-bias` value (DitWeights::router_bias_from_ema): true
/// for "ema" (router.expert_bias_ema, the official loader's), false for
/// "main" (router.expert_bias). Error naming `flag` and the value otherwise.
bool router_bias_from_ema(const std::string& s, const std::string& flag);

/// Parses the `--fp8-compute` value (DitWeights::fp8_compute, docs/fp8.md):
/// "w8a16" or "w8a8". Error naming `flag` and the value otherwise.
Fp8Compute fp8_compute_from_name(const std::string& s, const std::string& flag);

/// Parses a `--attention-compute` or `--linear-compute` value
/// (DitWeights::fp8_attention, DitWeights::quantize_linears; docs/fp8.md):
/// false for "bf16", true for "fp8". Error naming `flag` and the value otherwise.
bool fp8_from_compute_name(const std::string& s, const std::string& flag);

/// One expected tensor: official name, shape and parameter dtype.
struct DitTensorSpec {
  std::string name;
  Shape shape;
  DType dtype;
};

/// One transformer layer's tensors. Modality-specific tensors hold G = 3
/// stacked sets in mm layers (spec §1.3, §2.8); unused members stay undefined.
struct DitLayerWeights {
  int index = 0;
  bool mm = false;   ///< 3 modality sets for attention, dense MLP and mhc_norm
  bool moe = false;  ///< multi-head MoE MLP (else dense SwiGLU7 MLP)
  // mHC (spec §2.4, §9): fp32
  Tensor mhc_norm;                   ///< [G*4*D]
  Tensor phi_attn, phi_mlp;          ///< [4*D, 24], stored [in, out]
  MhcBranchWeights mhc_attn, mhc_mlp;
  // attention (spec §2.5)
  Tensor attn_pre_norm;   ///< [G*D] f32
  Tensor linear_g;        ///< [G*H, D] bf16
  Tensor linear_qkv;      ///< [G*3*D, D] bf16, per modality [q | k | v]
  Tensor linear_proj;     ///< [G*D, D] bf16
  Tensor sinks;           ///< [1, H] f32
  Tensor q_norm, k_norm;  ///< [G*hd] f32
  // MLP pre-norm: dense and MoE layers both have 3 modality sets (spec §2.6-2.7)
  Tensor mlp_pre_norm;    ///< [3*D] f32
  // dense MLP (spec §2.6)
  Tensor up_gate_proj;    ///< [3*2I, D] bf16, interleaved gate/up rows
  Tensor down_proj;       ///< [3*D, I] bf16
  // MoE (spec §2.7)
  Tensor split_linear, merge_linear;  ///< [D, D] bf16
  Tensor router_gate;                 ///< moe_mlp.gate [MH*E, DH] f32
  Tensor w_gate, w_up;                ///< [MH*E, DH, DE] bf16
  Tensor w_down;                      ///< [MH*E, DE, DH] bf16
  /// FP8 experts: w_gate/w_up/w_down are F8E4M3 and these their block scales
  /// (W_gate_scale_inv ...: [MH*E, ceil(DH/128), ceil(DE/128)] and
  /// [MH*E, ceil(DE/128), ceil(DH/128)] f32, w = q * scale); undefined for bf16.
  Tensor w_gate_scale, w_up_scale, w_down_scale;
  /// The banks' byte layout: Checkpoint (the shapes above) unless prepare_banks
  /// rewrote them for the device's W8A8 kernel (MoeExpertsParams::bank_layout).
  ExpertBankLayout bank_layout = ExpertBankLayout::Checkpoint;
  bool fp8_experts() const { return w_gate.defined() && w_gate.dtype() == DType::F8E4M3; }
  Tensor expert_bias;                 ///< router.expert_bias [MH*E] f32 (training bias)
  Tensor expert_bias_ema;             ///< router.expert_bias_ema [MH*E] f32 (used for selection)
  Tensor shared_fc1, shared_fc2;      ///< [2*Ish, D], [D, Ish] bf16
  Tensor msh_fc1, msh_fc2;            ///< modality_specific_shared_expert_fc1/fc2: [3*2*Im, D], [3*D, Im] bf16
  /// FP8 linears (`--linear-compute fp8`, DitWeights::quantize_linears): the
  /// linear's weight is then F8E4M3 and this its LinearParams::w_scale
  /// [G, ceil(out/128), ceil(in/128)] f32; undefined for bf16. linear_g stays bf16.
  Tensor linear_qkv_scale, linear_proj_scale, up_gate_proj_scale, down_proj_scale, split_linear_scale,
      merge_linear_scale, shared_fc1_scale, shared_fc2_scale, msh_fc1_scale, msh_fc2_scale;
};

/// Calls f(label, weight&, scale&, groups) for each linear of a layer that
/// `--linear-compute fp8` quantises (every dense linear but linear_g, whose 24
/// outputs per modality are one gate per head), where the layer has it;
/// `groups` is the weight's modality count G (weight [G*out, in]).
template <typename F>
void for_each_fp8_linear(DitLayerWeights& L, F&& f) {
  const int g = L.mm ? 3 : 1;
  f("linear_qkv", L.linear_qkv, L.linear_qkv_scale, g);
  f("linear_proj", L.linear_proj, L.linear_proj_scale, g);
  f("up_gate_proj", L.up_gate_proj, L.up_gate_proj_scale, 3);
  f("down_proj", L.down_proj, L.down_proj_scale, 3);
  f("split_linear", L.split_linear, L.split_linear_scale, 1);
  f("merge_linear", L.merge_linear, L.merge_linear_scale, 1);
  f("shared_expert_fc1", L.shared_fc1, L.shared_fc1_scale, 1);
  f("shared_expert_fc2", L.shared_fc2, L.shared_fc2_scale, 1);
  f("modality_specific_shared_expert_fc1", L.msh_fc1, L.msh_fc1_scale, 3);
  f("modality_specific_shared_expert_fc2", L.msh_fc2, L.msh_fc2_scale, 3);
}

/// One dense linear that `--linear-compute fp8` quantises, as the linear op
/// sees it: `in` -> `out` columns for each of its modality sets.
struct DitLinearShape {
  int layer = 0;
  std::string name;  ///< the for_each_fp8_linear label, e.g. "linear_qkv"
  int64_t in = 0, out = 0;
};

/// Every dense linear of `arch` that `--linear-compute fp8` quantises
/// (for_each_fp8_linear), in layer and module order, from the shapes alone
/// (nothing is allocated). Pure.
std::vector<DitLinearShape> dit_fp8_linear_shapes(const DitArch& arch);

/// Calls f(label, tensor&) for every tensor member of one layer, in module
/// order (the per-layer part of DitWeights::for_each_tensor).
template <typename F>
void for_each_layer_tensor(DitLayerWeights& L, F&& f);

/// All DiT tensors. Adapters are fp32 (spec §2.3).
struct DitWeights {
  Tensor video_embedder_w, video_embedder_b;  ///< [4D, 48], [4D]
  Tensor audio_embedder_w, audio_embedder_b;  ///< [4D, 64], [4D]
  Tensor text_embedder_w, text_embedder_b;    ///< [4D, 5120], [4D]
  Tensor rope_bands;                          ///< [hd/8]
  Tensor final_norm_video, final_norm_audio;  ///< [4D]
  Tensor final_linear_video;                  ///< [48, 4D]
  Tensor final_linear_audio;                  ///< [64, 4D]
  std::vector<DitLayerWeights> layers;
  size_t num_tensors = 0;
  size_t num_bytes = 0;
  /// Which router bias selects experts: expert_bias_ema (default, as the
  /// official loader) or expert_bias. bind() keeps the default; front ends
  /// set it from --router-bias (router_bias_from_ema, EngineOptions::router_bias).
  bool router_bias_from_ema = true;
  /// How FP8 routed experts compute (MoeExpertsParams::fp8_compute): W8A16
  /// (default) or W8A8; ignored for bf16 banks. Front ends set it from
  /// --fp8-compute (fp8_compute_from_name, EngineOptions::fp8_compute).
  Fp8Compute fp8_compute = Fp8Compute::W8A16;
  /// The self-attention in FP8 (AttentionParams::fp8; an experiment, docs/fp8.md):
  /// both backends. Front ends set it from --attention-compute
  /// (fp8_from_compute_name, EngineOptions::attention_compute).
  bool fp8_attention = false;

  /// Quantises every dense linear of for_each_fp8_linear to FP8 (W8A8 at run
  /// time: LinearParams::w_scale; `--linear-compute fp8`, docs/fp8.md): per
  /// modality, 128 x 128 block scales (quantize_fp8_blocks), in place; CPU
  /// tensors only (Error otherwise, or naming the linear with a non-finite
  /// value). No-op for linears already FP8.
  void quantize_linears();
  /// Whether the dense linears are FP8 (quantize_linears ran).
  bool fp8_linears() const;

  /// Binds every official tensor of `arch` from `ckpt` (zero-copy where the
  /// on-disk dtype is the parameter dtype, else an explicit converted copy).
  /// Names may carry a leading "transformer." and "layers." = "block.layers."
  /// (spec §2.1). Missing, unexpected and wrong-shape tensors are reported
  /// together in one Error naming the checkpoint.
  /// FP8 routed experts (an F8_E4M3 W_gate/W_up/W_down with its
  /// `<name>_scale_inv` f32 block scales) are detected from the dtype; then
  /// every routed expert bank must be FP8. `experts` converts at load when it
  /// asks for the other format (quantize_experts / dequantize_experts).
  static DitWeights bind(const Checkpoint& ckpt, const DitArch& arch, ExpertWeights experts = ExpertWeights::Auto);

  /// Weights for `arch` without a checkpoint (tests, `magi2 bench`): every
  /// official tensor is `make(spec)` (which must return a contiguous tensor of
  /// the spec's shape and dtype, on any device; it may return one storage for
  /// several specs, e.g. one expert bank shared by every MoE layer). Error when
  /// `make` returns a tensor of the wrong shape or dtype.
  /// With `experts` = FP8 the routed expert specs are F8E4M3 and followed by
  /// their `_scale_inv` f32 specs (dit_tensor_specs(arch, FP8)).
  static DitWeights generate(const DitArch& arch, const std::function<Tensor(const DitTensorSpec&)>& make,
                             ExpertWeights experts = ExpertWeights::BF16);

  /// Quantises every bf16 routed expert bank to FP8 with 128 x 128 block scales
  /// (quantize_fp8_blocks), in place; CPU tensors only (Error otherwise, or
  /// naming the bank with a non-finite value). No-op for FP8 banks.
  void quantize_experts();
  /// The inverse for FP8 banks: bf16(q * scale_inv), scales dropped. CPU only.
  void dequantize_experts();
  /// Whether the routed experts are FP8 (every MoE layer alike).
  bool fp8_experts() const;

  /// A copy whose every defined tensor lives on `be`'s device (contiguous),
  /// uploaded once in one batch (Backend::copy_many: pinned staging, several
  /// threads). Tensors already on that device are shared, not copied; so are
  /// tensors that are views of one storage (shared expert banks stay shared).
  /// Errors: out of device memory names the tensor.
  /// `progress` (optional): bytes uploaded so far and in all.
  DitWeights to_backend(Backend& be, const std::function<void(size_t done, size_t total)>& progress = {}) const;
  /// With FP8 experts on `be`'s device: the routed banks go to the layout the
  /// backend's moe_experts reads fastest for fp8_compute (Backend::
  /// moe_prepare_banks; W8A8 on CUDA: K-major, once here instead of once per
  /// layer call), each distinct bank once, one bank's bytes of extra device
  /// memory at a time while nothing else holds the old banks (drop the
  /// to_backend source first). Set fp8_compute before. Banks elsewhere stay.
  void prepare_banks(Backend& be);

  /// Calls f(name, tensor&) for every tensor member, in module order (the
  /// names are short labels for messages, not official checkpoint names).
  template <typename F>
  void for_each_tensor(F&& f);

  /// The selection bias of layer l (see router_bias_from_ema).
  const Tensor& selection_bias(int l) const {
    return router_bias_from_ema ? layers[l].expert_bias_ema : layers[l].expert_bias;
  }
};

template <typename F>
void DitWeights::for_each_tensor(F&& f) {
  f("video_embedder.w", video_embedder_w), f("video_embedder.b", video_embedder_b);
  f("audio_embedder.w", audio_embedder_w), f("audio_embedder.b", audio_embedder_b);
  f("text_embedder.w", text_embedder_w), f("text_embedder.b", text_embedder_b);
  f("rope_bands", rope_bands), f("final_norm_video", final_norm_video), f("final_norm_audio", final_norm_audio);
  f("final_linear_video", final_linear_video), f("final_linear_audio", final_linear_audio);
  for (DitLayerWeights& L : layers) for_each_layer_tensor(L, f);
}

template <typename F>
void for_each_layer_tensor(DitLayerWeights& L, F&& f) {
  Tensor* ts[] = {&L.mhc_norm, &L.phi_attn, &L.phi_mlp, &L.attn_pre_norm, &L.linear_g, &L.linear_qkv,
                  &L.linear_proj, &L.sinks, &L.q_norm, &L.k_norm, &L.mlp_pre_norm, &L.up_gate_proj, &L.down_proj,
                  &L.split_linear, &L.merge_linear, &L.router_gate, &L.w_gate, &L.w_up, &L.w_down,
                  &L.w_gate_scale, &L.w_up_scale, &L.w_down_scale, &L.expert_bias, &L.expert_bias_ema, &L.shared_fc1, &L.shared_fc2, &L.msh_fc1, &L.msh_fc2,
                  &L.linear_qkv_scale, &L.linear_proj_scale, &L.up_gate_proj_scale, &L.down_proj_scale,
                  &L.split_linear_scale, &L.merge_linear_scale, &L.shared_fc1_scale, &L.shared_fc2_scale,
                  &L.msh_fc1_scale, &L.msh_fc2_scale};
  for (Tensor* t : ts) f("layer", *t);
  for (MhcBranchWeights* m : {&L.mhc_attn, &L.mhc_mlp})
    for (Tensor* t : {&m->alpha_pre, &m->alpha_post, &m->alpha_res, &m->bias_pre, &m->bias_post, &m->bias_res})
      f("layer.mhc", *t);
}

/// The full list of official DiT tensor names with shapes and dtypes for an
/// architecture (spec §2.3-2.7), in module order. Used by the binder, by
/// `magi2 inspect` and by `magi2 make-tiny`.
/// With `experts` = FP8 the routed expert banks are F8E4M3, each followed by
/// its `<name>_scale_inv` spec (Auto counts as BF16 here).
std::vector<DitTensorSpec> dit_tensor_specs(const DitArch& arch, ExpertWeights experts = ExpertWeights::BF16);

/// Whether an official (canonical) tensor name is a routed expert bank
/// (`...mlp.moe_mlp.W_gate`, `W_up`, `W_down`): the tensors FP8 applies to.
bool is_routed_expert_weight(const std::string& name);

}  // namespace magi2
