#include "bench_decode.h"

#include <filesystem>
#include <random>
#include <vector>

#include "bench_stats.h"
#include "core/error.h"
#include "models/oobleck/decoder.h"
#include "models/oobleck/tiny.h"
#include "models/turbovae/decoder.h"
#include "models/turbovae/tiny.h"
#if defined(MAGI2_HAVE_CUDA)
#include "cuda/backend_cuda.h"
#endif

namespace magi2::cli {
namespace {

namespace fs = std::filesystem;

// A 10 s clip at 272p: 32 latent frames of 16 x 28 (448 x 256 pixels, 125
// frames after decode) and 250 audio latent frames (25 per second).
constexpr int64_t kLatentFrames = 32, kLatentH = 16, kLatentW = 28, kAudioFrames = 250;

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

}  // namespace

nlohmann::json bench_decode(const DecodeBenchArgs& a, Backend& be) {
  MAGI2_CHECK(be.device() == Device::CUDA,
              "bench --stage decode needs the CUDA backend (a GPU and --device auto|cuda): at the release widths the "
              "CPU backend takes minutes per TurboVAE decode");
  MAGI2_CHECK(a.steps >= 1 && a.warmup >= 0, "bench --stage decode: --steps must be >= 1 and --warmup >= 0");
  MAGI2_CHECK(!a.dir.empty(), "bench --stage decode: no folder for the random weights");
  const std::string tv_dir = a.dir + "/turbo_vae", sao_dir = a.dir + "/stable-audio-open-1.0";
  std::error_code ec;
  if (!fs::exists(fs::path(tv_dir) / kTurboVaeCheckpointName, ec)) {
    write_tiny_turbo_vae(tv_dir, 1, release_turbo_vae_config());
  }
  if (!fs::exists(fs::path(sao_dir) / "model.safetensors", ec)) write_tiny_sao_vae(sao_dir, 2, kReleaseSaoChannels);

  nlohmann::json j;
  const TurboVaeDecoder video = TurboVaeDecoder::load(tv_dir, be);
  const Tensor latent = normal_tensor({video.config().latent_channels, kLatentFrames, kLatentH, kLatentW}, 3);
  Shape frames;
  const double frames_ms = median_ms(be, a.steps, a.warmup, [&] { frames = video.decode_frames(latent).shape(); });
  const double u8_ms = median_ms(be, a.steps, a.warmup, [&] { (void)video.decode(latent); });
  j["turbovae"] = {{"latent", latent.shape()}, {"frames", frames}, {"decode_frames_ms", frames_ms},
                   {"decode_uint8_ms", u8_ms}, {"widths", video.config().decoder_block_out_channels}};

  const OobleckDecoder audio = OobleckDecoder::load(sao_dir, be);
  const Tensor alat = normal_tensor({kAudioFrames, audio.config().decoder.latent_dim}, 4);
  Shape wave, out;
  const double wave_ms = median_ms(be, a.steps, a.warmup, [&] { wave = audio.decode_waveform(alat).shape(); });
  const double audio_ms = median_ms(be, a.steps, a.warmup, [&] { out = audio.decode(alat).shape(); });
  j["oobleck"] = {{"latent", alat.shape()}, {"waveform", wave}, {"audio", out}, {"decode_waveform_ms", wave_ms},
                  {"decode_with_resample_ms", audio_ms}};
  j["steps"] = a.steps;
  j["warmup"] = a.warmup;
#if defined(MAGI2_HAVE_CUDA)
  j["peak_allocated_bytes"] = cuda_memory_stats(be).peak_in_use;
#endif
  return j;
}

}  // namespace magi2::cli
