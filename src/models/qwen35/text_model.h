// The Qwen3.5 text model forward (transformers Qwen3_5TextModel) up to the
// layer whose output is MAGI-2's text feature. Source: transformers
// modeling_qwen3_5.py (Qwen3_5DecoderLayer, Qwen3_5GatedDeltaNet,
// Qwen3_5Attention, Qwen3_5MLP, Qwen3_5RMSNorm); official
// inference/model/qwen35.py (`hidden_states[-(skip_layer + 1)]`) and
// inference_engine.py (`initialize_text_encoder(skip_layer=2)`); spec
// magi2-pipeline.md §2.3.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/qwen35/text_config.h"
#include "models/qwen35/text_weights.h"
#include "ops/ops.h"

namespace magi2::qwen35 {

/// The official skip_layer: features = hidden_states[-3], the output of layer
/// num_hidden_layers - 3 (layer 61 of 64).
constexpr int kOfficialSkipLayer = 2;

/// Observer of named intermediates: (name, layer, tensor). Names follow the
/// module tree: "embed_tokens", "input_layernorm", "in_proj_qkv", "in_proj_z",
/// "in_proj_b", "in_proj_a", "conv1d", "core_attn_out" [L*Hv, dv],
/// "gated_norm_out", "out_proj", "q_proj", "k_proj", "v_proj", "o_proj_in",
/// "o_proj_out", "mlp_out", "layer_out" (the layer's output = hidden_states[l+1]).
/// Tensors are views valid only during the call.
using TextTrace = std::function<void(const std::string& name, int layer, const Tensor& t)>;

/// Runs the text model on one backend. Activations are [L, D] rows in the
/// weights' compute dtype (bf16: the official CPU bf16 path and its rounding
/// points; f32: the fp32 reference).
class TextModel {
 public:
  /// `output_layer`: the last layer run; its output is returned.
  /// `offload` (optional, `--offload layerwise`): the layers of `w` are its
  /// slot views (TextWeights::to_backend_streamed) and each forward streams
  /// them; it must outlive the model. Error if output_layer >=
  /// weights.num_bound_layers, or the offload holds fewer layers than run.
  TextModel(const TextConfig& cfg, const TextWeights& w, Backend& be, int output_layer,
            LayerOffload* offload = nullptr);

  /// hidden state after layer `output_layer` for token ids [L] (L >= 1):
  /// a new [L, D] tensor in the compute dtype on the backend's device (the
  /// weights must be there: TextWeights::to_backend). `trace` gets host
  /// tensors. Errors: empty input (the official model crashes on it), an id
  /// outside the vocabulary.
  Tensor forward(const std::vector<int64_t>& ids, const TextTrace& trace = {}) const;

  int output_layer() const { return output_layer_; }
  Backend& backend() const { return be_; }

 private:
  void linear_attention(const TextLayerWeights& L, const Tensor& x, const Tensor& out, int layer,
                        const TextTrace& trace) const;
  void full_attention(const TextLayerWeights& L, const Tensor& x, const Tensor& out, int layer,
                      const TextTrace& trace) const;
  void mlp(const TextLayerWeights& L, const Tensor& x, const Tensor& out) const;

  const TextConfig& cfg_;
  const TextWeights& w_;
  Backend& be_;
  int output_layer_;
  LayerOffload* offload_;
  Tensor inv_freq_;  ///< [rotary_dim/2] f32, 1 / theta^(2i/rotary_dim) in fp32 as transformers
};

}  // namespace magi2::qwen35
