// Qwen3.5 text model configuration (transformers Qwen3_5TextConfig), read
// from the text encoder folder's config.json. Source: transformers
// configuration_qwen3_5.py; official inference/model/qwen35.py loads the
// folder with Qwen3_5TextModel.from_pretrained; spec magi2-pipeline.md §2.3.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace magi2::qwen35 {

/// The text model's hyper-parameters (only what the forward needs).
struct TextConfig {
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int intermediate_size = 0;
  int vocab_size = 0;
  // gated full attention
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  double rope_theta = 1e7;
  double partial_rotary_factor = 0.25;
  std::vector<int> mrope_section;  ///< informative: text positions make M-RoPE plain RoPE
  // Gated DeltaNet linear attention
  int linear_num_key_heads = 0;
  int linear_num_value_heads = 0;
  int linear_key_head_dim = 0;
  int linear_value_head_dim = 0;
  int linear_conv_kernel_dim = 4;
  double rms_norm_eps = 1e-6;
  /// Per layer: true = "full_attention", false = "linear_attention".
  std::vector<bool> full_attention;
  std::string source;  ///< file the config came from (error messages)

  /// Parses config.json text: a plain `qwen3_5_text` config, or a composite
  /// `qwen3_5` (VLM) config whose `text_config` holds it. `layer_types` may be
  /// absent (then every `full_attention_interval`-th layer, default 4, is full
  /// attention, as transformers). Rope keys are read from `rope_parameters`
  /// or, in older files, from the top level. Errors: magi2::Error naming
  /// `source` and the key for bad JSON, missing/invalid values, an
  /// unsupported `hidden_act` (only silu), attention bias, or inconsistent
  /// head counts.
  static TextConfig from_json_text(std::string_view text, const std::string& source);
  /// from_json_text on the file's contents; Error naming the file if unreadable.
  static TextConfig from_file(const std::string& path);
  /// Qwen3.5-27B's text tower (spec magi2-pipeline.md §2.1; the public
  /// config): hidden 5120, MLP 17408, vocab 248320, gated attention 24/4
  /// heads x 256, DeltaNet 16/48 heads x 128, conv 4, theta 1e7, partial
  /// rotary 0.25; `layers` layers (the release: 64), every 4th (3, 7, ...)
  /// full attention. `source` names it for messages. Never throws.
  static TextConfig qwen35_27b(int layers = 64);

  int key_dim() const { return linear_num_key_heads * linear_key_head_dim; }
  int value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }
  /// Rotary dims per head: int(head_dim * partial_rotary_factor) (transformers).
  int rotary_dim() const { return static_cast<int>(head_dim * partial_rotary_factor); }
};

}  // namespace magi2::qwen35
