#include "bench_decode.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "bench_stats.h"
#include "core/error.h"
#include "engine/params.h"
#include "io/mmap_file.h"
#include "media/png.h"
#include "models/magi2_dit/config.h"
#include "models/magi2_refiner/config.h"
#include "models/oobleck/decoder.h"
#include "models/oobleck/tiny.h"
#include "models/turbovae/decoder.h"
#include "models/turbovae/tiny.h"
#include "models/wan22_vae/encoder.h"
#include "models/wan22_vae/tiny.h"
#include "models/wan22_vae/weights.h"
#include "pipeline/decode.h"
#include "pipeline/generate.h"
#include "pipeline/reference_image.h"
#include "pipeline/refine.h"
#if defined(MAGI2_HAVE_CUDA)
#include "cuda/backend_cuda.h"
#endif

namespace magi2::cli {
namespace {

namespace fs = std::filesystem;

Tensor normal_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::F32);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = nd(rng);
  return t;
}

// Median milliseconds of `steps` calls of f after `warmup` untimed ones (each waits for the device).
template <typename F>
double median_ms(Backend& be, int steps, int warmup, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto t = bench_clock::now();
    f();
    be.synchronize();
    ms.push_back(ms_since(t));
  }
  return median(ms);
}

// The device bytes in use now; the allocator's peak restarts here, so
// end_peak() after an entry's calls is that entry's peak, not the run's.
nlohmann::json begin_peak(Backend& be) {
#if defined(MAGI2_HAVE_CUDA)
  if (be.device() == Device::CUDA) {
    cuda_reset_memory_peak(be);
    return cuda_memory_stats(be).in_use;
  }
#endif
  (void)be;
  return nullptr;
}

nlohmann::json end_peak(Backend& be) {
#if defined(MAGI2_HAVE_CUDA)
  if (be.device() == Device::CUDA) return cuda_memory_stats(be).peak_in_use;
#endif
  (void)be;
  return nullptr;
}

}  // namespace

DecodeTarget decode_target(const std::string& resolution) {
  MAGI2_CHECK(resolution == "272p" || resolution == "540p" || resolution == "1080p",
              "--resolutions: unknown resolution '", resolution, "' for --stage decode (272p, 540p or 1080p)");
  // The CLI's request defaults (10 s; the preview and refiner pixel sizes of
  // each resolution), sized as Engine::prepare and refine_latents size them.
  GenerateParams p;
  p.resolution = resolution;
  const LatentShape ls =
      latent_shape_for_clip(p.seconds, p.pixel_width(), p.pixel_height(), Magi2Config::release().eval.fps);
  DecodeTarget t{.resolution = resolution,
                 .latent = {1, ls.channels, ls.frames, ls.height, ls.width},
                 .preview_width = p.pixel_width(),
                 .preview_height = p.pixel_height(),
                 .audio_frames = ls.audio_frames};
  if (p.refines()) {
    const RefinedLatentSize r =
        refined_latent_size(RefinerConfig::release().eval, ls.frames, p.refiner_width, p.refiner_height);
    t.latent = {1, ls.channels, r.frames, r.height, r.width};
  }
  return t;
}

std::vector<std::string> parse_decode_resolutions(const std::string& list) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const std::string& res : split_commas(list)) {
    (void)decode_target(res);  // the one error for an unknown name
    MAGI2_CHECK(seen.insert(res).second, "--resolutions: '", res, "' is listed twice");
    out.push_back(res);
  }
  MAGI2_CHECK(!out.empty(), "--resolutions: no resolution given for --stage decode (272p, 540p or 1080p)");
  return out;
}

nlohmann::json bench_decode(const DecodeBenchArgs& a, Backend& be) {
  MAGI2_CHECK(a.tiny_widths || be.device() == Device::CUDA,
              "bench --stage decode needs the CUDA backend (a GPU and --device auto|cuda): at the release widths the "
              "CPU backend takes minutes per TurboVAE decode");
  MAGI2_CHECK(a.steps >= 1 && a.warmup >= 0, "bench --stage decode: --steps must be >= 1 and --warmup >= 0");
  MAGI2_CHECK(!a.dir.empty(), "bench --stage decode: no folder for the random weights");
  MAGI2_CHECK(!a.resolutions.empty(), "bench --stage decode: --resolutions is empty");
  std::vector<DecodeTarget> targets;
  for (const std::string& r : a.resolutions) targets.push_back(decode_target(r));
  auto report = [&](const std::string& codec, const nlohmann::json& e) {
    if (a.on_entry) a.on_entry(codec, e);
  };

  // The official layout (as make-random writes it), so ClipDecoders::load reads it as the engine does.
  const fs::path root(a.dir);
  const std::string tv_dir = (root / "turbo_vae").string(), sao_dir = (root / "stable-audio-open-1.0").string();
  const std::string wan_pth = (root / "vae" / "Wan2.2_VAE.pth").string();
  std::error_code ec;
  if (!fs::exists(fs::path(tv_dir) / kTurboVaeCheckpointName, ec))
    write_tiny_turbo_vae(tv_dir, 1, a.tiny_widths ? tiny_turbo_vae_config() : release_turbo_vae_config());
  if (!fs::exists(fs::path(sao_dir) / "model.safetensors", ec))
    write_tiny_sao_vae(sao_dir, 2, a.tiny_widths ? 4 : kReleaseSaoChannels);
  if (!fs::exists(wan_pth, ec)) {
    fs::create_directories(root / "vae", ec);  // the .pth writer expects its folder
    write_tiny_wan22_vae(wan_pth, 3, a.tiny_widths ? Wan22VaeLayout{} : release_wan22_vae_layout());
  }

  nlohmann::json j = {{"turbovae", nlohmann::json::array()}, {"wan22_encoder", nlohmann::json::array()}};
  {
    // The engine's decode phase: both decoders loaded together, the video decoded first.
    const ClipDecoders dec = ClipDecoders::load(a.dir, be);
    const TurboVaeDecoder& video = dec.video();
    uint64_t seed = 3;
    for (const DecodeTarget& t : targets) {
      const Tensor latent = normal_tensor(t.latent, seed++);
      const Tensor latent4 = latent.reshape({t.latent[1], t.latent[2], t.latent[3], t.latent[4]});
      nlohmann::json e = {{"resolution", t.resolution}, {"weights_bytes", begin_peak(be)}};
      Shape frames;
      const double model_ms = median_ms(be, a.steps, a.warmup, [&] { frames = video.decode_frames(latent4).shape(); });
      // The decode_video phase of a generate run: ClipDecoders::decode_frames on the final latent.
      const double pipeline_ms = median_ms(be, a.steps, a.warmup, [&] { (void)dec.decode_frames(latent); });
      e.update({{"input", t.latent}, {"output", frames}, {"model_ms", model_ms}, {"pipeline_ms", pipeline_ms},
                {"model_call", "TurboVaeDecoder::decode_frames (bf16 frames to the host)"},
                {"pipeline_call", "ClipDecoders::decode_frames (uint8 frames to the host: the decode_video phase)"},
                {"widths", video.config().decoder_block_out_channels},
                {"peak_allocated_bytes", end_peak(be)}});
      report("turbovae", e);
      j["turbovae"].push_back(e);
    }

    const OobleckDecoder& audio = dec.audio();
    const Tensor alat = normal_tensor({targets.front().audio_frames, audio.config().decoder.latent_dim}, 4);
    nlohmann::json e = {{"resolution", "any (10 s)"}, {"weights_bytes", begin_peak(be)}};
    Shape wave, out;
    const double model_ms = median_ms(be, a.steps, a.warmup, [&] { wave = audio.decode_waveform(alat).shape(); });
    const double pipeline_ms = median_ms(be, a.steps, a.warmup, [&] { out = audio.decode(alat).shape(); });
    e.update({{"input", alat.shape()}, {"waveform", wave}, {"output", out}, {"model_ms", model_ms},
              {"pipeline_ms", pipeline_ms}, {"model_call", "OobleckDecoder::decode_waveform (51.2 kHz)"},
              {"pipeline_call", "OobleckDecoder::decode (with the 44.1 kHz host resample: the decode_audio phase)"},
              {"peak_allocated_bytes", end_peak(be)}});
    report("oobleck", e);
    j["oobleck"] = e;
  }

  {
    // The reference_image phase of an I2VA run: the .pth's encoder tensors on
    // the host, uploaded once (Engine: Wan22EncoderWeights::load, then Wan22Encoder).
    const Wan22EncoderWeights w = Wan22EncoderWeights::load(wan_pth);
    const Wan22Encoder enc(w, be);
    std::set<std::pair<int64_t, int64_t>> done;  // 540p and 1080p share the preview size
    std::mt19937_64 rng(5);
    for (const DecodeTarget& t : targets) {
      const int64_t W = t.preview_width, H = t.preview_height;
      if (!done.insert({W, H}).second) continue;
      // A picture already at the preview size (its aspect), so the host resize is
      // the official path's cheapest; a larger photo adds its LANCZOS resize.
      Tensor rgb = Tensor::empty({H, W, 3}, DType::U8);
      for (int64_t i = 0; i < rgb.numel(); ++i) rgb.data_as<uint8_t>()[i] = static_cast<uint8_t>(rng() & 0xff);
      const std::string png = (root / ("bench_reference_" + std::to_string(W) + "x" + std::to_string(H) + ".png")).string();
      write_file_atomic(png, encode_png_rgb(rgb));
      Tensor pixels = Tensor::empty({3, H, W}, DType::F32);
      for (int64_t i = 0; i < pixels.numel(); ++i)
        pixels.data_as<float>()[i] = static_cast<float>(static_cast<double>(rng() >> 11) * 0x1p-52 - 1.0);
      nlohmann::json e = {{"resolution", t.resolution}, {"weights_bytes", begin_peak(be)}};
      Shape lat;
      const double model_ms = median_ms(be, a.steps, a.warmup, [&] { lat = enc.encode(pixels).shape(); });
      // The engine encodes at the latent grid times 16 (Engine::run, spec pipeline §1.3).
      const double pipeline_ms =
          median_ms(be, a.steps, a.warmup, [&] { (void)encode_reference_image(png, W, H, enc); });
      e.update({{"input", pixels.shape()}, {"output", lat}, {"image", png}, {"model_ms", model_ms},
                {"pipeline_ms", pipeline_ms}, {"model_call", "Wan22Encoder::encode (f32 pixels from the host)"},
                {"pipeline_call", "encode_reference_image (PNG decode, resize/pad, encode: the reference_image phase)"},
                {"width_c_dim", w.dim}, {"peak_allocated_bytes", end_peak(be)}});
      report("wan22_encoder", e);
      j["wan22_encoder"].push_back(e);
    }
  }
  j["steps"] = a.steps;
  j["warmup"] = a.warmup;
  j["dir"] = a.dir;
  return j;
}

}  // namespace magi2::cli
