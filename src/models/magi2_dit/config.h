// MAGI-2 Preview configuration in the official JSON layout
// (configs/magi2_preview.json: engine_config, arch_config, evaluation_config;
// official inference/common/magi2_config.py). Spec: magi2-dit.md §1.
#pragma once

#include <string>
#include <vector>

namespace magi2 {

/// `arch_config`: the DiT architecture. Defaults are the release values (spec §1.1).
struct DitArch {
  int num_layers = 40;
  int hidden_size = 3072;          ///< D: width of one mHC stream and of every branch
  int head_dim = 128;              ///< attention head dim
  int num_query_groups = 24;       ///< K/V heads (no GQA in the release: = D / head_dim)
  int video_in_channels = 48;
  int audio_in_channels = 64;
  int text_in_channels = 5120;
  std::string params_dtype = "bfloat16";
  double intermediate_factor = 4.0;
  std::vector<int> mm_layers = {0, 1, 38, 39};  ///< layers with 3 modality weight sets
  std::string activation_type = "swiglu7";
  double attn_softcap = -1.0;      ///< <= 0: disabled
  bool attn_gating = true;
  bool attn_sinks = true;
  int sink_token_num = 1;
  bool mhc_enable = true;
  int mhc_num_stream = 4;
  double mhc_alpha_init = 0.01;
  // moe_config
  int moe_num_experts = 256;       ///< experts per MoE head
  int moe_top_k = 6;
  std::string moe_score_func = "sigmoid";
  bool moe_route_norm = true;
  double moe_route_scale = 4.9;
  std::vector<int> moe_layers;     ///< default 2..37 (filled by the constructor)
  int moe_expert_intermediate_size = 1280;
  int moe_shared_expert_intermediate_size = 1280;
  int moe_modality_specific_expert_intermediate_size = 1280;
  int moe_num_heads = 12;

  DitArch();

  // Derived sizes (spec §1.2).
  int num_heads_q() const { return hidden_size / head_dim; }
  int num_heads_kv() const { return num_query_groups; }
  int virtual_width() const { return hidden_size * mhc_num_stream; }
  /// Dense MLP intermediate: floor(int(D * factor * 2/3) / 128) * 128.
  int dense_intermediate() const;
  int moe_head_dim() const { return hidden_size / moe_num_heads; }
  int rope_bands() const { return head_dim / 8; }
  int max_in_channels() const;   ///< packed input width C_pad upper bound
  int out_channels() const;      ///< max(video, audio) in-channels (= 64)
  bool is_mm_layer(int layer) const;
  bool is_moe_layer(int layer) const;

  /// Throws Error naming `source` and the key when the values are inconsistent
  /// or unsupported (non-swiglu7, no mHC, non-sigmoid router, GQA, ...).
  void validate(const std::string& source) const;
};

/// The `data_proxy_config` inside `evaluation_config` (spec pipeline §4).
struct DataProxyConfig {
  int t_patch_size = 1;
  int patch_size = 1;
  std::string spatial_rope_interpolation = "extra";
  bool add_time_token = false;
  int time_channel_dim = 64;
};

/// `evaluation_config`: the sampler and pipeline knobs (spec pipeline §1.2, §5).
struct EvaluationConfig {
  double fps = 12.5;
  double shift = 7.0;
  std::vector<int> vae_stride = {8, 16, 16};
  std::vector<int> patch_size = {1, 1, 1};
  int z_dim = 48;
  std::string txt_encoder_type = "qwen35";
  double video_txt_guidance_scale = 5.0;
  double audio_txt_guidance_scale = 7.0;
  bool use_cfg_trick = false;
  bool use_dynamic_cfg = false;
  bool use_negative_prompt = true;
  bool use_ref_for_uncond = true;
  bool use_skimmed_cfg_linear = false;
  double cfg_rescale = 0.0;
  int num_inference_steps = 100;
  DataProxyConfig data_proxy;
};

/// `engine_config` (only the fields the C++ engine reads).
struct EngineConfig {
  int seed = 42;
  std::string load = "preview";
  int cp_size = 1;
  int ep_size = 1;
};

/// The whole configuration file.
struct Magi2Config {
  EngineConfig engine;
  DitArch arch;
  EvaluationConfig eval;
  std::string source = "<built-in release config>";

  /// The release configuration (configs/magi2_preview.json values).
  static Magi2Config release();
  /// Parses a config file in the official layout. Missing keys keep the release
  /// default; a key of the wrong type, an unknown arch key, or an inconsistent
  /// value is an Error naming the key and the file.
  static Magi2Config from_file(const std::string& path);
  static Magi2Config from_json_text(const std::string& text, const std::string& source);
  /// Human-readable summary (for `magi2 inspect`).
  std::string summary() const;
};

}  // namespace magi2
