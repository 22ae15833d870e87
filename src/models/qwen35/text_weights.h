// Qwen3.5 text model weights bound by their transformers names
// (Qwen3_5TextModel module tree: embed_tokens, layers.N.{input_layernorm,
// linear_attn | self_attn, post_attention_layernorm, mlp}, norm).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "models/qwen35/text_config.h"
#include "ops/layer_offload.h"
#include "ops/ops.h"

namespace magi2::qwen35 {

/// One decoder layer. Linear weights are [out, in] in the compute dtype; norm
/// gains and the DeltaNet scalars are f32 copies of the stored values.
struct TextLayerWeights {
  bool full_attention = false;
  Tensor input_layernorm, post_attention_layernorm;  ///< [D] f32 (gain 1 + w)
  // Gated DeltaNet (linear_attn.*)
  Tensor in_proj_qkv;  ///< [2*Hk*dk + Hv*dv, D]
  Tensor in_proj_z;    ///< [Hv*dv, D]
  Tensor in_proj_b;    ///< [Hv, D]
  Tensor in_proj_a;    ///< [Hv, D]
  Tensor conv1d;       ///< [conv_dim, K] (stored [conv_dim, 1, K])
  Tensor a_log;        ///< A_log [Hv] f32
  Tensor dt_bias;      ///< [Hv] f32
  Tensor gated_norm;   ///< linear_attn.norm.weight [dv] f32 (plain gain)
  Tensor out_proj;     ///< [D, Hv*dv]
  // gated full attention (self_attn.*)
  Tensor q_proj;          ///< [H*2*hd, D]: per head query hd then gate hd
  Tensor k_proj, v_proj;  ///< [Hkv*hd, D]
  Tensor o_proj;          ///< [D, H*hd]
  Tensor q_norm, k_norm;  ///< [hd] f32 (gain 1 + w)
  // SiLU-gated MLP
  Tensor gate_proj, up_proj;  ///< [I, D]
  Tensor down_proj;           ///< [D, I]
};

/// All text model tensors. Only layers [0, num_bound_layers) are bound for
/// compute (later layers are checked for presence and shape only).
struct TextWeights {
  DType dtype = DType::BF16;  ///< compute dtype of the linear/conv weights
  Tensor embed_tokens;        ///< [vocab, D] bf16 (as stored; gathered rows are cast)
  Tensor norm;                ///< final norm [D] f32 (unused by the features)
  std::vector<TextLayerWeights> layers;
  int num_bound_layers = 0;
  std::string prefix;      ///< "", "model." (CausalLM) or "model.language_model." (VLM layout)
  size_t num_ignored = 0;  ///< tensors skipped on purpose (lm_head, mtp.*, model.visual.*)

  /// Binds every tensor of `cfg` from `ckpt`, accepting the plain layout
  /// (`embed_tokens.weight`, `layers.N...`, `norm.weight`) and the VLM layout
  /// (the same under `model.language_model.`, or `model.` as in a
  /// *ForCausalLM folder, with `lm_head.weight`, `mtp.*` and `model.visual.*`
  /// ignored). Stored bf16 tensors are zero-copy views of the mmap'd shards;
  /// f16/f32 ones are rounded to bf16 once, as the official
  /// torch_dtype=bfloat16 load (a converted copy replaces the view). With F32
  /// (the fp32 reference mode) linear weights of the layers below
  /// `num_layers_needed` are upcast once (f32 tensors kept as stored) and the
  /// rest stay unconverted. Missing, unexpected, wrong-shape and non-float
  /// tensors are reported together in one Error naming the checkpoint.
  static TextWeights bind(const Checkpoint& ckpt, const TextConfig& cfg, DType dtype, int num_layers_needed);

  /// Tensors made by `make(name, shape, dtype)` for the first `num_layers`
  /// layers of `cfg` (tests, benchmarks: e.g. random weights made on a device),
  /// in the shapes and dtypes bind() gives: linear and conv weights in `dtype`
  /// (conv1d as [C, K]), embed_tokens bf16, gains and DeltaNet scalars f32.
  /// Later layers stay undefined (num_bound_layers = num_layers).
  static TextWeights generate(const TextConfig& cfg, DType dtype, int num_layers,
                              const std::function<Tensor(const std::string&, const Shape&, DType)>& make);

  /// A copy whose compute tensors (embed_tokens, norm and every tensor of the
  /// layers below num_bound_layers) live on `be`'s device, uploaded at once
  /// with Backend::copy_many (`progress` gets bytes done / in all); the
  /// unbound layers stay unconverted host views (never read). The CPU backend
  /// gets `*this`. Error naming the tensor when the device cannot hold it.
  TextWeights to_backend(const TextConfig& cfg, Backend& be,
                         const std::function<void(size_t done, size_t total)>& progress = {}) const;

  /// `--offload layerwise` (TextEncoder::load): the tensors of the bound
  /// layers, layer by layer in the binder's order, named as in the plain layout.
  std::vector<OffloadLayer> bound_layer_tensors(const TextConfig& cfg) const;
  /// A copy whose bound layers compute from `off`'s device views (made from
  /// bound_layer_tensors) and whose other compute tensors (embed_tokens,
  /// norm) are uploaded as to_backend does. Errors: those of to_backend, or an
  /// Error when `off` was not made from these layers (layer or tensor counts).
  TextWeights to_backend_streamed(const TextConfig& cfg, Backend& be, const LayerOffload& off) const;
};

/// Expected tensor of the plain layout: name, shape (released in bf16).
struct TextTensorSpec {
  std::string name;
  Shape shape;
};

/// Every tensor of a Qwen3_5TextModel with `cfg`, plain layout, module order
/// (used by the binder and by `magi2 make-tiny`).
std::vector<TextTensorSpec> text_tensor_specs(const TextConfig& cfg);

/// The layer of a plain-layout name ("layers.<l>.*"), or -1 (embed_tokens, norm).
int text_layer_of(const std::string& name);

}  // namespace magi2::qwen35
