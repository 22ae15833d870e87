// MAGI-2's text conditioning: a text encoder folder (config.json, safetensors,
// tokenizer.json) turned into prompt features, as the official
// Qwen35TextEncoder does (inference/model/qwen35.py: normalise -> tokenise
// (max 7000 tokens) -> Qwen3_5TextModel -> hidden_states[-3] in bf16) and
// get_special_token for the I2VA `<Figure 1>` token. Spec magi2-pipeline.md
// §2.2-2.7.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint.h"
#include "models/qwen35/prompt.h"
#include "models/qwen35/text_config.h"
#include "models/qwen35/text_model.h"
#include "models/qwen35/text_weights.h"
#include "models/qwen35/tokenizer.h"
#include "ops/ops.h"

namespace magi2::qwen35 {

/// Features of one prompt.
struct TextFeatures {
  PreparedPrompt prompt;  ///< text after augmentation/normalisation, ids, truncation report
  Tensor features;        ///< [L, D] bf16 (f32 in the fp32 reference mode): hidden_states[-3]
  Tensor special_token;   ///< I2VA only: [1, D] in the features' dtype (zeros if no figure token)
};

/// The official get_special_token for one target: the mean of the feature
/// rows at `indices` (fp32 sum in row order, divided by the count, rounded
/// once to the features' dtype), or zeros when `indices` is empty.
/// features [L, D] bf16|f32 on the CPU; returns [1, D] of the same dtype.
/// Error for an index outside [0, L).
Tensor special_token(const Tensor& features, const std::vector<int64_t>& indices);

/// A loaded text encoder. Holds the mmap'd checkpoint (zero-copy bf16 weights).
class TextEncoder {
 public:
  /// Loads `dir`/config.json (plain qwen3_5_text or composite qwen3_5 with
  /// text_config), the safetensors checkpoint in `dir` (sharded index or a
  /// single file; plain, CausalLM or VLM key layout) and `dir`/tokenizer.json
  /// (+ tokenizer_config.json). `dtype` BF16 = the official CPU bf16 path,
  /// F32 = fp32 reference (weights upcast once). On a device backend the
  /// bound weights are uploaded once (TextWeights::to_backend) and the
  /// forward runs there; features come back to the host. Only the layers up to the
  /// feature layer (num_hidden_layers - 1 - skip_layer) run. With `stream`
  /// (`--offload layerwise` on a device: the backend's copy queue) those
  /// layers stay in pinned host memory and stream through two device slots
  /// per forward (LayerOffload); the features are the same bytes. `progress`
  /// (optional): bytes pinned so far and in all. Errors: one line naming the
  /// file/tensor at fault (see TextConfig, TextWeights::bind, Tokenizer::load,
  /// LayerOffload).
  static std::unique_ptr<TextEncoder> load(const std::string& dir, Backend& be, DType dtype = DType::BF16,
                                           int skip_layer = kOfficialSkipLayer,
                                           std::unique_ptr<CopyQueue> stream = nullptr,
                                           const std::function<void(size_t, size_t)>& progress = {});

  /// prepare_prompt (I2VA augmentation when `i2v`, normalisation, tokenise with
  /// truncation at opt.max_length) then the forward; when `i2v` also the
  /// special token of `<Figure 1>`. Errors: those of prepare_prompt (empty
  /// prompt, invalid UTF-8, malformed JSON with JsonPromptPolicy::kStrict) and
  /// of the forward.
  TextFeatures encode(std::string_view prompt, bool i2v, const EncodeOptions& opt = {},
                      JsonPromptPolicy policy = JsonPromptPolicy::kOfficial, const TextTrace& trace = {}) const;

  /// Features of already tokenised ids ([L, D] on the host, see TextModel::forward).
  Tensor features(const std::vector<int64_t>& ids, const TextTrace& trace = {}) const;

  const TextConfig& config() const { return cfg_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  const TextWeights& weights() const { return w_; }
  const std::string& dir() const { return dir_; }
  /// The layer streaming of `--offload layerwise`, or null when the layers are resident.
  LayerOffload* offload() const { return offload_.get(); }

 private:
  TextEncoder() = default;
  std::string dir_;
  TextConfig cfg_;
  Checkpoint ckpt_;
  std::unique_ptr<LayerOffload> offload_;  // before w_ and model_: they view its slots
  TextWeights w_;
  std::shared_ptr<const Tokenizer> tok_;
  std::unique_ptr<TextModel> model_;
};

}  // namespace magi2::qwen35
