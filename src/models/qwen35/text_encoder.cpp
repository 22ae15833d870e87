#include "models/qwen35/text_encoder.h"

#include <filesystem>

#include "core/error.h"

namespace magi2::qwen35 {

namespace fs = std::filesystem;

Tensor special_token(const Tensor& features, const std::vector<int64_t>& indices) {
  MAGI2_CHECK(features.dim() == 2 && features.is_contiguous() && features.device() == Device::CPU &&
                  (features.dtype() == DType::BF16 || features.dtype() == DType::F32),
              "special_token: features must be a contiguous CPU [L, D] bf16/f32 tensor, got ",
              shape_str(features.shape()));
  const int64_t len = features.size(0), d = features.size(1);
  std::vector<float> sum(static_cast<size_t>(d), 0.f);
  for (int64_t i : indices) {
    MAGI2_CHECK(i >= 0 && i < len, "special_token: index ", i, " is outside the ", len, " feature rows");
    for (int64_t c = 0; c < d; ++c) sum[c] += features.get_f32(i * d + c);
  }
  const float n = static_cast<float>(indices.size());
  if (!indices.empty())
    for (float& v : sum) v /= n;
  Tensor f = Tensor::from_f32({1, d}, sum);
  return features.dtype() == DType::F32 ? f : f.to(features.dtype());
}

std::unique_ptr<TextEncoder> TextEncoder::load(const std::string& dir, Backend& be, DType dtype, int skip_layer,
                                               std::unique_ptr<CopyQueue> stream,
                                               const std::function<void(size_t, size_t)>& progress) {
  MAGI2_CHECK(fs::is_directory(dir), "text encoder folder '", dir, "' does not exist");
  const fs::path cfg_path = fs::path(dir) / "config.json";
  MAGI2_CHECK(fs::is_regular_file(cfg_path), "text encoder folder '", dir, "' has no config.json");
  std::unique_ptr<TextEncoder> e(new TextEncoder());
  e->dir_ = dir;
  e->cfg_ = TextConfig::from_file(cfg_path.string());
  const int out_layer = e->cfg_.num_hidden_layers - 1 - skip_layer;
  MAGI2_CHECK(skip_layer >= 0 && out_layer >= 0, "text encoder config '", cfg_path.string(),
              "': ", e->cfg_.num_hidden_layers, " layers cannot give hidden_states[-", skip_layer + 1, "]");
  e->ckpt_ = Checkpoint::open(dir);
  const TextWeights host = TextWeights::bind(e->ckpt_, e->cfg_, dtype, out_layer + 1);
  if (stream) {
    e->offload_ =
        std::make_unique<LayerOffload>(host.bound_layer_tensors(e->cfg_), be, std::move(stream), "text encoder", progress);
    e->w_ = host.to_backend_streamed(e->cfg_, be, *e->offload_);
  } else {
    e->w_ = host.to_backend(e->cfg_, be, progress);
  }
  e->tok_ = Tokenizer::load(dir);
  e->model_ = std::make_unique<TextModel>(e->cfg_, e->w_, be, out_layer, e->offload_.get());
  return e;
}

Tensor TextEncoder::features(const std::vector<int64_t>& ids, const TextTrace& trace) const {
  return to_host(model_->backend(), model_->forward(ids, trace));
}

TextFeatures TextEncoder::encode(std::string_view prompt, bool i2v, const EncodeOptions& opt, JsonPromptPolicy policy,
                                 const TextTrace& trace) const {
  if (policy == JsonPromptPolicy::kStrict) (void)normalize_prompt(prompt, JsonPromptPolicy::kStrict);
  TextFeatures f;
  f.prompt = prepare_prompt(*tok_, prompt, i2v, opt);
  f.features = features(f.prompt.encoding.ids, trace);
  if (i2v) f.special_token = special_token(f.features, f.prompt.figure_indices);
  return f;
}

}  // namespace magi2::qwen35
