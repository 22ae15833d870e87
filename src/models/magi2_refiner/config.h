// MAGI-2 1080p refiner configuration in the official JSON layout
// (configs/magi2_refiner.json: magi2_refiner_arch_config and the magi2_refiner_*
// keys of evaluation_config; official inference/common/magi2_config.py
// Magi2RefinerModelConfig / Magi2RefinerDataProxyConfig). docs/refiner.md §1.
#pragma once

#include <string>
#include <vector>

namespace magi2 {

/// The refiner transformer (official magi2_refiner.py Transformer).
struct RefinerArch {
  int num_layers = 30;
  int hidden_size = 4096;
  int head_dim = 128;
  int num_query_groups = 8;  ///< K/V heads (GQA: 32 query heads share 8)
  int video_in_channels = 48;
  int audio_in_channels = 64;
  int text_in_channels = 5120;
  std::string params_dtype = "bfloat16";
  std::vector<int> mm_layers = {0, 1, 28, 29};  ///< layers with 3 modality weight sets
  std::vector<int> local_attn_layers;           ///< window-attention layers (default: all)
  bool enable_attn_gating = true;
  std::string activation_type = "swiglu7";

  RefinerArch();
  int num_heads_q() const { return hidden_size / head_dim; }
  int num_heads_kv() const { return num_query_groups; }
  /// SwiGLU7 intermediate size: int(4 D * 2 / 3) rounded down to a multiple of 4.
  int intermediate() const { return (hidden_size * 8 / 3) / 4 * 4; }
  int rope_bands() const { return head_dim / 8; }
  bool is_mm_layer(int layer) const;
  bool is_local_attn_layer(int layer) const;
  /// Errors name `source` and the key: sizes, heads, layer lists, dtype, activation.
  void validate(const std::string& source) const;

  /// The first `layers` layers of this arch (0 or >= num_layers: unchanged),
  /// mm layers kept at both ends as the release's 0, 1, 28, 29 of 30, every
  /// layer window attention: `magi2 bench --stage refiner --layers` and
  /// `magi2 make-random --refiner-layers`. Error (validate, naming `source`)
  /// when the result is inconsistent.
  RefinerArch first_layers(int layers, const std::string& source) const;
};

/// The block-window attention of the data proxy (attn_config, mode "window",
/// level "block", block_mode "grid": the release; docs/refiner.md §5).
struct RefinerWindow {
  int block_t = 8;     ///< block_t_size: latent frames per block
  int block_hw = 4;    ///< block_size: latent rows / columns per block
  int radius_t = 2, radius_h = 2, radius_w = 2;  ///< neighbour blocks attended per axis
};

/// The refiner stage of evaluation_config.
struct RefinerEval {
  double video_guidance_scale = 2.0;   ///< magi2_refiner_video_txt_guidance_scale
  double audio_guidance_scale = 5.0;   ///< magi2_refiner_audio_txt_guidance_scale (no audio tokens in the release)
  int noise_value = 220;               ///< magi2_refiner_noise_value: index into the zero-SNR sigma table
  std::vector<int> vae_stride = {4, 16, 16};  ///< magi2_refiner_vae_stride
  double audio_noise_scale = -1.0;     ///< magi2_refiner_audio_noise_scale (< 0: no audio tokens)
  int num_inference_steps = 5;         ///< magi2_refiner_num_inference_steps
  double shift = 5.0;                  ///< magi2_refiner_shift
  RefinerWindow window;
};

/// The whole refiner configuration.
struct RefinerConfig {
  RefinerArch arch;
  RefinerEval eval;
  std::string source = "built-in release refiner config";

  /// The values of the official configs/magi2_refiner.json.
  static RefinerConfig release();
  /// Parses the official layout; absent keys keep the release values; other
  /// top-level sections (arch_config, engine_config, "extends") are ignored.
  /// Features the release does not use (post-norm layers, patch sizes > 1,
  /// dense / scan / frame-level attention, audio re-noising, a condition input)
  /// are refused with an Error naming the key.
  static RefinerConfig from_json_text(const std::string& text, const std::string& source);
  static RefinerConfig from_file(const std::string& path);
};

}  // namespace magi2
