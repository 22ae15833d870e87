// TurboVAE decoder forward (see decoder.h). Reads top-down like the official
// module tree: conv_in -> mid_block -> up_blocks -> RMS/SiLU -> conv_out ->
// unpatchify, wrapped in the temporal sliding window.
#include "models/turbovae/decoder.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_depth.h"
#include "io/mmap_file.h"
#include "io/torch_zip.h"
#include "models/wan22_vae/latent_stats.h"

namespace magi2 {
namespace {

namespace fs = std::filesystem;

// [.., C] activations as rows of C channels (norms, activations, adds are row ops).
Tensor rows_of(const Tensor& x) { return x.reshape({x.numel() / x.size(-1), x.size(-1)}); }

// Final RMS norm eps and the ResBlock norm1/norm2 eps (official: 1e-8 literals).
constexpr float kRmsEps = 1e-8f;

}  // namespace

std::string turbo_vae_config_path(const std::string& dir) {
  std::error_code ec;
  MAGI2_CHECK(fs::is_directory(dir, ec), "TurboVAE folder '", dir, "' does not exist");
  fs::path cfg = fs::path(dir) / kTurboVaeConfigName;
  if (!fs::exists(cfg, ec)) {
    // Another name: the folder's only JSON object with "_class_name": "TurboVAED".
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() != ".json") continue;
      const std::string text = read_text_file(e.path().string());
      if (json_nesting_depth(text) > kMaxJsonDepth) continue;  // not a config of ours
      const auto j = nlohmann::json::parse(text, nullptr, false);
      if (j.is_object() && j.contains("_class_name") && j["_class_name"] == "TurboVAED") found.push_back(e.path());
    }
    MAGI2_CHECK(found.size() == 1, "TurboVAE folder '", dir, "' has no ", kTurboVaeConfigName, " and ",
                found.empty() ? "no other" : "more than one", " JSON config with \"_class_name\": \"TurboVAED\"");
    cfg = found.front();
  }
  return cfg.string();
}

TurboVaeDecoder TurboVaeDecoder::load(const std::string& dir, Backend& be, DType dtype) {
  return load_files(turbo_vae_config_path(dir), (fs::path(dir) / kTurboVaeCheckpointName).string(), be, dtype);
}

TurboVaeDecoder TurboVaeDecoder::load_files(const std::string& config_path, const std::string& ckpt_path, Backend& be,
                                            DType dtype) {
  TurboVaeConfig cfg = TurboVaeConfig::from_json_file(config_path);
  std::error_code ec;
  MAGI2_CHECK(fs::is_regular_file(ckpt_path, ec), "TurboVAE checkpoint '", ckpt_path, "' does not exist");
  std::string key;
  for (const auto& k : torch_checkpoint_keys(ckpt_path)) {
    if (k == "ema_state_dict") key = k;
    if (k == "state_dict" && key.empty()) key = k;
  }
  const TorchStateDict sd = load_torch_checkpoint(ckpt_path, key);
  TurboVaeWeights w = bind_turbo_vae_weights(cfg, sd, dtype);
  return TurboVaeDecoder(std::move(cfg), std::move(w), be);
}

TurboVaeDecoder::TurboVaeDecoder(TurboVaeConfig cfg, TurboVaeWeights weights, Backend& be)
    : cfg_(std::move(cfg)), w_(std::move(weights)), be_(&be) {
  MAGI2_CHECK(cfg_.latent_channels == kWan22LatentChannels, "TurboVAE: latent_channels ", cfg_.latent_channels,
              " but the Wan2.2 latent statistics have ", kWan22LatentChannels, " channels");
  // scale = [mean, 1/std]; 1/std is an fp32 tensor op upstream.
  std::vector<float> inv(kWan22LatentChannels), mean(kWan22LatentChannels);
  for (int c = 0; c < kWan22LatentChannels; ++c) {
    inv[c] = 1.0f / kWan22LatentStd[c];
    mean[c] = kWan22LatentMean[c];
  }
  inv_std_ = Tensor::from_f32({kWan22LatentChannels}, inv);
  mean_ = Tensor::from_f32({kWan22LatentChannels}, mean);
  // Weights and statistics go to the backend's device once (a no-op on the CPU backend).
  std::vector<Tensor*> ts{&inv_std_, &mean_};
  auto conv = [&ts](TurboConv& c) { ts.insert(ts.end(), {&c.w, &c.b}); };
  auto res = [&](TurboResBlock& r) {
    conv(r.conv1);
    conv(r.conv2);
    conv(r.conv_shortcut);
  };
  conv(w_.conv_in);
  for (TurboResBlock& r : w_.mid_block) res(r);
  for (TurboUpBlock& u : w_.up_blocks) {
    if (u.has_conv_in) res(u.conv_in);
    if (u.has_upsampler) {
      conv(u.upsampler.time_conv);
      conv(u.upsampler.resample);
    }
    for (TurboResBlock& r : u.resnets) res(r);
  }
  conv(w_.conv_out);
  to_backend_in_place(be, ts, "TurboVAE weights");
}

Shape TurboVaeDecoder::frames_shape(const Shape& s) const {
  MAGI2_CHECK(s.size() == 4 && s[0] == cfg_.latent_channels && s[1] >= 1 && s[2] >= 1 && s[3] >= 1,
              "TurboVAE: expected a latent [", cfg_.latent_channels, ", T, h, w], got ", shape_str(s));
  const int64_t up = cfg_.spatial_upscale();
  return {(s[1] - 1) * (int64_t{1} << cfg_.temporal_upsamplers()) + 1, s[2] * up, s[3] * up, cfg_.out_channels};
}

// ------------------------------------------------------------ building blocks

// TurboVAEDCausalConv3d (non-causal): replicate the edge frames (kT-1)/2 times
// in time, zero-pad H/W by k/2; kt = 1 also serves the Conv2d of the upsamplers.
Tensor TurboVaeDecoder::conv(const TurboConv& c, const Tensor& x, int kt, int kh, int kw) const {
  Tensor y = be_->alloc({x.size(0), x.size(1), x.size(2), c.out_channels()}, w_.dtype);
  be_->conv3d({.x = x,
               .w = c.w,
               .bias = c.b,
               .y = y,
               .pad_front = {(kt - 1) / 2, kh / 2, kw / 2},
               .pad_back = {(kt - 1) / 2, kh / 2, kw / 2},
               .time_pad = TimePad::Replicate});
  return y;
}

// Weightless RMSNorm over channels: bf16(x * rsqrt(mean(f32(x)^2) + eps)).
Tensor TurboVaeDecoder::rms(const Tensor& x, float eps) const {
  const int64_t c = x.size(-1);
  Tensor& gain = rms_gain_[c];
  if (!gain.defined()) {
    gain = be_->alloc({c}, DType::F32);
    be_->zero(gain);
  }
  Tensor y = be_->alloc(x.shape(), w_.dtype);
  be_->rms_norm({.x = rows_of(x), .w = gain, .y = rows_of(y), .groups = Groups::single(x.numel() / c), .eps = eps});
  return y;
}

void TurboVaeDecoder::act(const Tensor& x, Activation kind) const {
  be_->activation({.x = rows_of(x), .y = rows_of(x), .kind = kind});
}

// TurboVAEDResNetBlock3d.
Tensor TurboVaeDecoder::res_block(const TurboResBlock& r, const Tensor& x) const {
  Tensor h = rms(x, kRmsEps);
  act(h, r.relu_first ? Activation::ReLU : Activation::SiLU);
  h = conv(r.conv1, h, 3, 3, 3);
  h = rms(h, kRmsEps);
  act(h, Activation::SiLU);
  h = conv(r.conv2, h, 3, 3, 3);
  Tensor shortcut = x;
  if (r.has_shortcut()) shortcut = conv(r.conv_shortcut, rms(x, static_cast<float>(cfg_.resnet_norm_eps)), 1, 1, 1);
  be_->add({.a = rows_of(h), .b = rows_of(shortcut), .out = rows_of(h)});
  return h;
}

// WanResample: upsample3d doubles time through time_conv's two channel halves
// (dropping frame 0 on the first chunk); both modes then double H and W
// (nearest) and apply the 3x3 Conv2d per frame.
Tensor TurboVaeDecoder::upsample(const TurboUpsampler& u, const Tensor& x, bool is_first_chunk) const {
  Tensor h = x;
  if (u.temporal) {
    Tensor tc = conv(u.time_conv, x, 3, 1, 1);  // [T, H, W, 2C]
    const int drop = is_first_chunk ? 1 : 0;
    h = be_->alloc({2 * x.size(0) - drop, x.size(1), x.size(2), x.size(3)}, w_.dtype);
    be_->channels_to_time({.x = tc, .y = h, .n = 2, .drop_front = drop});
  }
  Tensor up = be_->alloc({h.size(0), 2 * h.size(1), 2 * h.size(2), h.size(3)}, w_.dtype);
  be_->upsample_nearest({.x = h, .y = up, .factor_h = 2, .factor_w = 2});
  return conv(u.resample, up, 1, 3, 3);
}

// ------------------------------------------------------------ one decoder call

Tensor TurboVaeDecoder::forward_chunk(const Tensor& z, bool is_first_chunk, const std::string& tag) const {
  return to_host(*be_, forward_chunk_on(to_backend(*be_, z), is_first_chunk, tag));
}

Tensor TurboVaeDecoder::forward_chunk_on(const Tensor& z, bool is_first_chunk, const std::string& tag) const {
  check_tensor(z, {z.size(0), z.size(1), z.size(2), cfg_.latent_channels}, w_.dtype, "TurboVAE chunk input");
  const std::string pre = tag.empty() ? "" : tag + "_";
  Tensor h = conv(w_.conv_in, z, 3, 3, 3);
  emit(pre + "conv_in", h);
  for (const auto& r : w_.mid_block) h = res_block(r, h);
  emit(pre + "mid_block", h);
  for (size_t b = 0; b < w_.up_blocks.size(); ++b) {
    const TurboUpBlock& ub = w_.up_blocks[b];
    if (ub.has_conv_in) h = res_block(ub.conv_in, h);
    if (ub.has_upsampler) h = upsample(ub.upsampler, h, is_first_chunk);
    for (const auto& r : ub.resnets) h = res_block(r, h);
    emit(pre + "up_block" + std::to_string(b), h);
  }
  h = rms(h, kRmsEps);
  act(h, Activation::SiLU);
  h = conv(w_.conv_out, h, 3, 3, 3);  // [n', H/p, W/p, 3*p*p]
  const int64_t p = cfg_.patch_size;
  Tensor out = be_->alloc({h.size(0), h.size(1) * p, h.size(2) * p, cfg_.out_channels}, w_.dtype);
  be_->unpatchify({.x = h, .y = out, .patch = static_cast<int>(p)});
  return out;
}

// ------------------------------------------------------------ sliding window

Tensor TurboVaeDecoder::decode_frames(const Tensor& latent) const { return to_host(*be_, decode_frames_on(latent)); }

Tensor TurboVaeDecoder::decode_frames_on(const Tensor& host_latent) const {
  const Shape fs_shape = frames_shape(host_latent.shape());
  MAGI2_CHECK(host_latent.is_contiguous() && (host_latent.dtype() == DType::F32 || host_latent.dtype() == DType::BF16),
              "TurboVAE: the latent must be a contiguous f32 or bf16 tensor");
  const Tensor latent = to_backend(*be_, host_latent);
  const int64_t C = latent.size(0), T = latent.size(1), h = latent.size(2), w = latent.size(3);
  // The pipeline hands the decoder a bf16 latent (decode_video: latent.to(bf16)).
  Tensor zb = be_->alloc(latent.shape(), DType::BF16);
  be_->cast({.src = latent.reshape({C, T * h * w}), .dst = zb.reshape({C, T * h * w})});

  const TurboChunkPlan plan =
      plan_turbo_chunks(T, cfg_.first_chunk_size, cfg_.step_size, cfg_.temporal_compression_ratio);
  Tensor z = be_->alloc({plan.padded_frames, h, w, C}, w_.dtype);
  be_->latent_denorm({.x = zb, .inv_std = inv_std_, .mean = mean_, .y = z.slice_rows(0, T)});
  const Tensor zf = z.reshape({plan.padded_frames, h * w * C});
  for (int64_t t = T; t < plan.padded_frames; ++t)  // repeat the last frame
    be_->cast({.src = zf.slice_rows(T - 1, T), .dst = zf.slice_rows(t, t + 1)});

  Tensor out = be_->alloc(fs_shape, w_.dtype);
  const int64_t frame_elems = fs_shape[1] * fs_shape[2] * fs_shape[3];
  const Tensor of = out.reshape({fs_shape[0], frame_elems});
  int64_t pos = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const TurboChunk& c = plan.chunks[i];
    const Tensor zin = z.slice_rows(c.begin, c.end);
    emit("chunk" + std::to_string(i) + "_in", zin);
    const Tensor y = forward_chunk_on(zin, c.first, "dec" + std::to_string(i));
    const int64_t keep_end = y.size(0) - c.drop_back;
    const int64_t n = std::min(keep_end - c.drop_front, fs_shape[0] - pos);  // the padding's frames fall off the end
    if (n > 0) {
      const Tensor yf = y.reshape({y.size(0), frame_elems});
      be_->cast({.src = yf.slice_rows(c.drop_front, c.drop_front + n), .dst = of.slice_rows(pos, pos + n)});
      pos += n;
    }
  }
  MAGI2_CHECK(pos == fs_shape[0], "TurboVAE: internal error: ", pos, " frames decoded, expected ", fs_shape[0]);
  return out;
}

Tensor TurboVaeDecoder::decode(const Tensor& latent) const {
  const Tensor f = decode_frames_on(latent);
  Tensor u8 = be_->alloc(f.shape(), DType::U8);
  be_->frames_to_u8({.x = rows_of(f), .y = rows_of(u8)});
  return to_host(*be_, u8);
}

}  // namespace magi2
