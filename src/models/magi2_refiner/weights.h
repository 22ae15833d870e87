// Refiner weights bound strictly to the official tensor names
// (refiner/model.safetensors.index.json + shards; official magi2_refiner.py
// module tree). docs/refiner.md §2.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/checkpoint.h"
#include "models/magi2_refiner/config.h"
#include "ops/ops.h"

namespace magi2 {

/// One layer. G = 3 modality weight sets in mm layers, else 1; D hidden,
/// Hq/Hkv heads of hd, I the SwiGLU7 intermediate (RefinerArch::intermediate).
struct RefinerLayerWeights {
  bool mm = false;
  Tensor attn_pre_norm;  ///< attention.pre_norm.weight [G*D] f32 (gain 1 + w)
  Tensor linear_qkv;     ///< attention.linear_qkv.weight [G*(Hq+2Hkv)*hd, D] bf16
  Tensor linear_g;       ///< attention.linear_g.weight [G*Hq, D] bf16 (per-head output gate)
  Tensor linear_proj;    ///< attention.linear_proj.weight [G*D, Hq*hd] bf16
  Tensor q_norm;         ///< attention.q_norm.weight [G*hd] f32
  Tensor k_norm;         ///< attention.k_norm.weight [G*hd] f32
  Tensor mlp_pre_norm;   ///< mlp.pre_norm.weight [G*D] f32
  Tensor up_gate_proj;   ///< mlp.up_gate_proj.weight [G*2I, D] bf16 (interleaved gate/linear rows)
  Tensor down_proj;      ///< mlp.down_proj.weight [G*D, I] bf16
};

/// Every tensor of the refiner.
struct RefinerWeights {
  Tensor video_embedder_w, video_embedder_b;  ///< pre_adapter.video_embedder [D, 48], [D] f32
  Tensor audio_embedder_w, audio_embedder_b;  ///< pre_adapter.audio_embedder [D, 64], [D] f32
  Tensor text_embedder_w, text_embedder_b;    ///< pre_adapter.text_embedder [D, C_text], [D] f32
  Tensor rope_bands;                          ///< pre_adapter.rope.bands [hd/8] f32 (persistent buffer)
  std::vector<RefinerLayerWeights> layers;
  Tensor final_norm_video, final_norm_audio;      ///< post_adapter.final_norm_* [D] f32
  Tensor final_linear_video, final_linear_audio;  ///< post_adapter.final_linear_* [48, D], [64, D] f32
  size_t num_tensors = 0;
  size_t num_bytes = 0;

  /// Binds every official tensor of `arch` from `ckpt` (cast to the compute
  /// dtype at load). Errors: one line listing missing / unexpected / mis-shaped
  /// tensors by name.
  static RefinerWeights bind(const Checkpoint& ckpt, const RefinerArch& arch);
  /// Tensors made by `make(name, shape, dtype)` (make-tiny, tests).
  static RefinerWeights generate(const RefinerArch& arch,
                                 const std::function<Tensor(const std::string&, const Shape&, DType)>& make);
  /// A copy with every tensor on `be`'s device (one batched upload; the CPU
  /// backend gets the same views). Errors name the tensor that does not fit.
  RefinerWeights to_backend(const RefinerArch& arch, Backend& be,
                            const std::function<void(size_t done, size_t total)>& progress = {}) const;
  /// The official names, shapes and dtypes of `arch`, in module order.
  static std::vector<std::pair<std::string, std::pair<Shape, DType>>> specs(const RefinerArch& arch);
};

}  // namespace magi2
