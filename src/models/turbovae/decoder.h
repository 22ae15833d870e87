// The TurboVAE video decoder (the default MAGI-2 video decode): Wan2.2 latent
// [48, T, h, w] -> RGB frames [4T-3, 16h, 16w, 3]. Spec magi2-pipeline.md
// §6.1 and §7.1; official inference/model/turbo_vaed.py (TurboVAED.decode,
// TurboVAEDDecoder3d) and Magi2InferenceEngine.decode_video.
//
// Numerics: with DType::BF16 (the official pipeline) weights are the
// checkpoint cast to bf16 and every activation is bf16 at the official
// rounding points (conv outputs, RMS norms, activations, residual adds); the
// de-normalisation and RMS statistics are fp32. DType::F32 runs everything in
// fp32 (the official decoder with fp32 weights, as the golden CPU reference).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "core/tensor.h"
#include "models/turbovae/chunk_plan.h"
#include "models/turbovae/config.h"
#include "models/turbovae/weights.h"
#include "ops/ops.h"

namespace magi2 {

/// Official config file name inside the release's turbo_vae/ folder.
inline constexpr const char* kTurboVaeConfigName = "TurboV3-Wan22-TinyShallow_7_7.json";
/// Official checkpoint file name inside turbo_vae/.
inline constexpr const char* kTurboVaeCheckpointName = "checkpoint.ckpt";

/// The config file of a TurboVAE folder: `dir`/TurboV3-Wan22-TinyShallow_7_7.json,
/// or when absent the folder's only *.json whose "_class_name" is "TurboVAED".
/// Errors: the folder is missing, or there is no such file or more than one.
std::string turbo_vae_config_path(const std::string& dir);

/// A loaded decoder bound to one backend (which must outlive it). One decode
/// at a time per instance (it caches per-width norm gains). On a device
/// backend the weights are uploaded once at construction, inputs on each
/// call; results and dumps come back as host tensors.
class TurboVaeDecoder {
 public:
  /// Loads `turbo_vae_dir`/TurboV3-Wan22-TinyShallow_7_7.json (or, when that
  /// file is absent, the folder's only *.json whose "_class_name" is
  /// "TurboVAED") and `turbo_vae_dir`/checkpoint.ckpt.
  /// The state dict is "ema_state_dict" if present, else "state_dict", else the
  /// saved dict itself (official get_turbo_vaed). Errors name the folder/file.
  static TurboVaeDecoder load(const std::string& turbo_vae_dir, Backend& be, DType dtype = DType::BF16);
  /// Same with explicit paths.
  static TurboVaeDecoder load_files(const std::string& config_path, const std::string& checkpoint_path, Backend& be,
                                    DType dtype = DType::BF16);

  TurboVaeDecoder(TurboVaeConfig cfg, TurboVaeWeights weights, Backend& be);

  const TurboVaeConfig& config() const { return cfg_; }
  DType dtype() const { return w_.dtype; }

  /// Output frames shape [T', H, W, out_channels] for a latent [C, T, h, w]:
  /// T' = (T - 1) * 2^u + 1 for u temporal upsamplers (4T - 3 for the release),
  /// H = h * spatial_upscale, W likewise. Error on a wrong rank or channel count.
  Shape frames_shape(const Shape& latent_shape) const;

  /// Decodes a latent [C, T, h, w] (f32 or bf16; the official pipeline rounds
  /// it to bf16 first, done here too) into frames [T', H, W, 3] in the
  /// compute dtype, values ~[-1, 1] (the official decoder output, batch 0,
  /// channels last). Chunks follow plan_turbo_chunks.
  Tensor decode_frames(const Tensor& latent) const;

  /// decode_frames then the official float -> uint8 rule (spec §7.1):
  /// frames [T', H, W, 3] u8 RGB.
  Tensor decode(const Tensor& latent) const;

  /// One decoder call (TurboVAEDDecoder3d.forward): z [n, h, w, C] de-normalised
  /// latent in the compute dtype -> [n', H, W, out_channels]. `tag` prefixes
  /// the dumped intermediates ("dec0" -> "dec0_conv_in", ...).
  Tensor forward_chunk(const Tensor& z, bool is_first_chunk, const std::string& tag = "") const;

  /// Observer for named intermediates (channels-last host tensors, valid during the
  /// call): "chunk<i>_in", "<tag>_conv_in", "<tag>_mid_block",
  /// "<tag>_up_block<b>" (tags are "dec<i>" in decode_frames).
  using DumpFn = std::function<void(const std::string& name, const Tensor& t)>;
  void set_dump(DumpFn fn) { dump_ = std::move(fn); }

 private:
  // decode_frames / forward_chunk with the result left on the backend's device.
  Tensor decode_frames_on(const Tensor& host_latent) const;
  Tensor forward_chunk_on(const Tensor& z, bool is_first_chunk, const std::string& tag) const;
  Tensor conv(const TurboConv& c, const Tensor& x, int kt, int kh, int kw) const;
  Tensor rms(const Tensor& x, float eps) const;
  void act(const Tensor& x, Activation kind) const;
  Tensor res_block(const TurboResBlock& r, const Tensor& x) const;
  Tensor upsample(const TurboUpsampler& u, const Tensor& x, bool is_first_chunk) const;
  void emit(const std::string& name, const Tensor& t) const {
    if (dump_) dump_(name, to_host(*be_, t));
  }

  TurboVaeConfig cfg_;
  TurboVaeWeights w_;
  Backend* be_;
  Tensor inv_std_, mean_;                       // [C] f32
  mutable std::map<int64_t, Tensor> rms_gain_;  // zero gains per width (the op applies 1 + w)
  DumpFn dump_;
};

}  // namespace magi2
