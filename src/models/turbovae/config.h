// TurboVAE decoder configuration in the official JSON layout
// (turbo_vae/TurboV3-Wan22-TinyShallow_7_7.json: the keyword arguments of the
// official TurboVAED.__init__, inference/model/turbo_vaed.py, plus
// "_class_name"). Spec magi2-pipeline.md §6.1.
#pragma once

#include <string>
#include <vector>

namespace magi2 {

/// The decoder-relevant keys. Defaults are the official constructor defaults
/// (used when a key is absent, as the official from_config does); the release
/// file sets every one of them (values in the comments).
struct TurboVaeConfig {
  int latent_channels = 128;                            ///< release 48
  int out_channels = 3;
  std::vector<int> decoder_block_out_channels = {128, 256, 512, 512};   ///< release (64,128,256,512)
  std::vector<int> decoder_layers_per_block = {4, 3, 3, 3, 4};         ///< release (2,2,2,3,3)
  std::vector<bool> decoder_spatio_temporal_scaling = {true, true, true, false};  ///< release (F,T,T,T)
  std::vector<bool> decoder_spatio_only = {false, false, false, false};           ///< release (F,T,F,F)
  std::vector<bool> decoder_is_dw_conv = {false, false, false, false, false};
  int decoder_dw_kernel_size = 3;
  bool decoder_causal = false;
  int patch_size = 4;                                    ///< release 2
  int patch_size_t = 1;
  double resnet_norm_eps = 1e-6;
  int first_chunk_size = 3;                              ///< release 7
  int step_size = 5;                                     ///< release 7
  int spatial_compression_ratio = 16;
  int temporal_compression_ratio = 4;
  bool use_unpatchify = false;                           ///< release true

  /// Parses the official JSON text; `source` names it in errors. Keys starting
  /// with "_" and keys the decoder does not use are ignored (the official
  /// constructor absorbs them); a known key of the wrong type, bad JSON, or
  /// a configuration this engine does not implement (see validate) is an
  /// Error naming the source and key.
  static TurboVaeConfig from_json_text(const std::string& text, const std::string& source);
  /// Reads and parses a JSON file (Error naming the path).
  static TurboVaeConfig from_json_file(const std::string& path);
  /// The official JSON layout (with "_class_name": "TurboVAED"), 2-space indented.
  std::string to_json() const;

  /// Throws Error naming `source` unless this is the decoder the engine runs:
  /// 4 up blocks (5 layer counts), non-causal, no depth-wise convs, patch_size
  /// 2 with use_unpatchify, patch_size_t 1, positive widths/chunk sizes.
  void validate(const std::string& source) const;

  /// Spatial upsampling of the whole decoder (2 per scaling up block x patch).
  int spatial_upscale() const;
  /// Number of up blocks that double time (scaling and not spatio_only).
  int temporal_upsamplers() const;
};

}  // namespace magi2
