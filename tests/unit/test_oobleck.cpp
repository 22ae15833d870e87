// Stable Audio Open VAE pieces that the golden test does not reach: config
// validation, strict weight binding, the tiny-model writer, and the Fourier
// resample against a float64 DFT written here (spec magi2-pipeline.md §6.2).
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "models/oobleck/decoder.h"
#include "models/oobleck/resample.h"
#include "models/oobleck/tiny.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

// scipy.signal.resample for real input, by direct float64 DFTs.
std::vector<double> resample_ref(const std::vector<double>& x, int64_t m) {
  const int64_t n = static_cast<int64_t>(x.size()), keep = std::min(n, m);
  std::vector<std::complex<double>> Y(m / 2 + 1);
  for (int64_t k = 0; k <= keep / 2; ++k) {
    std::complex<double> s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i] * std::polar(1.0, -2 * std::numbers::pi * double(k * i % n) / n);
    Y[k] = s;
  }
  if (keep % 2 == 0 && m < n) Y[keep / 2] *= 2.0;
  if (keep % 2 == 0 && m > n) Y[keep / 2] *= 0.5;
  std::vector<double> y(m);
  for (int64_t t = 0; t < m; ++t) {
    double s = Y[0].real();
    for (int64_t k = 1; k <= m / 2; ++k) {
      const std::complex<double> e = std::polar(1.0, 2 * std::numbers::pi * double(k * t % m) / m);
      // the Nyquist bin of an even m stands alone; its imaginary part is dropped
      s += (2 * k == m) ? Y[k].real() * e.real() : 2 * (Y[k] * e).real();
    }
    y[t] = s / m * (double(m) / n);
  }
  return y;
}

TEST(OobleckResample, MatchesFloat64Dft) {
  std::mt19937 g(3);
  std::normal_distribution<double> nd(0, 0.3);
  const std::pair<int64_t, int64_t> sizes[] = {{512, 441}, {64, 55}, {30, 17}, {17, 30}, {32, 24}, {24, 32},
                                               {31, 31}, {2048, 1764}};
  for (auto [n, m] : sizes) {
    Tensor x = Tensor::zeros({n, 2}, DType::F32);
    std::vector<double> c0(n), c1(n);
    for (int64_t i = 0; i < n; ++i) {
      x.data_as<float>()[2 * i] = static_cast<float>(nd(g));
      x.data_as<float>()[2 * i + 1] = static_cast<float>(nd(g));
      c0[i] = x.data_as<float>()[2 * i];
      c1[i] = x.data_as<float>()[2 * i + 1];
    }
    Tensor y = fourier_resample(x, m);
    ASSERT_EQ(y.shape(), (Shape{m, 2}));
    const auto r0 = resample_ref(c0, m), r1 = resample_ref(c1, m);
    double worst = 0;
    for (int64_t t = 0; t < m; ++t) {
      worst = std::max(worst, std::fabs(y.data_as<float>()[2 * t] - r0[t]));
      worst = std::max(worst, std::fabs(y.data_as<float>()[2 * t + 1] - r1[t]));
    }
    std::printf("  resample %lld -> %lld: max abs %.3g\n", static_cast<long long>(n), static_cast<long long>(m), worst);
    EXPECT_LE(worst, 2e-7) << n << " -> " << m;
  }
}

TEST(OobleckResample, RejectsBadInput) {
  EXPECT_TRUE(throws_with([] { fourier_resample(Tensor::zeros({4}, DType::F32), 3); }, {"fourier_resample"}));
  EXPECT_TRUE(throws_with([] { fourier_resample(Tensor::zeros({4, 2}, DType::F32), 0); }, {"fourier_resample"}));
}

std::string tiny_json() { return tiny_sao_vae_config_json(4); }

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

TEST(OobleckConfig, ParsesTinyAndRejectsUnsupported) {
  const SaoVaeConfig c = SaoVaeConfig::from_json_text(tiny_json(), "t.json");
  EXPECT_EQ(c.decoder.channels, 4);
  EXPECT_EQ(c.decoder.c_mults, (std::vector<int64_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(c.encoder.latent_dim, 128);
  EXPECT_FALSE(c.decoder.final_tanh);
  auto parse = [](const std::string& t) { return [t] { SaoVaeConfig::from_json_text(t, "t.json"); }; };
  EXPECT_TRUE(throws_with(parse("{"), {"t.json", "JSON"}));
  EXPECT_TRUE(throws_with(parse(replace(tiny_json(), "\"final_tanh\": false", "\"final_tanh\": true")),
                          {"t.json", "decoder.config.final_tanh"}));
  EXPECT_TRUE(throws_with(parse(replace(tiny_json(), "\"final_tanh\": false", "\"final_tanh\": 0")),
                          {"t.json", "final_tanh", "true or false"}));
  EXPECT_TRUE(throws_with(parse(replace(tiny_json(), "\"downsampling_ratio\": 2048", "\"downsampling_ratio\": 1024")),
                          {"t.json", "strides", "2048", "1024"}));
  EXPECT_TRUE(throws_with(parse(replace(tiny_json(), "\"type\": \"autoencoder\"", "\"type\": \"dac\"")),
                          {"t.json", "model.pretransform.type", "autoencoder"}));
  EXPECT_TRUE(throws_with(parse(replace(tiny_json(), "\"sample_rate\": 44100,", "")), {"t.json", "sample_rate"}));
}

// The tiny folder with one safetensors edit: drop `drop`, add `extra`.
std::string edited_copy(const std::string& src_dir, const std::string& tag, const std::string& drop,
                        const std::pair<std::string, Tensor>& extra) {
  const std::string dir = temp_dir(tag);
  auto f = SafetensorsFile::open(src_dir + "/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const auto& e : f->entries())
    if (e.name != drop) ts.emplace_back(e.name, f->tensor(e.name));
  if (!extra.first.empty()) ts.push_back(extra);
  write_safetensors(dir + "/model.safetensors", ts);
  write_file_atomic(dir + "/model_config.json", read_text_file(src_dir + "/model_config.json"));
  return dir;
}

TEST(OobleckTiny, WritesLoadsAndDecodes) {
  const std::string dir = temp_dir("sao_tiny") + "/stable-audio-open-1.0";
  write_tiny_sao_vae(dir, 7);
  auto be = make_cpu_backend();
  OobleckDecoder dec = OobleckDecoder::load(dir, *be);
  EXPECT_EQ(dec.weights().num_tensors, 182u);
  const auto specs = tiny_sao_vae_tensor_specs();
  EXPECT_EQ(specs.size(), 183u + 182u + 1u);
  EXPECT_EQ(SafetensorsFile::open(dir + "/model.safetensors")->entries().size(), specs.size());
  Tensor latent = Tensor::zeros({1, 3, 64}, DType::F32);
  std::mt19937 g(1);
  std::normal_distribution<float> nd(0, 1);
  for (int64_t i = 0; i < latent.numel(); ++i) latent.data_as<float>()[i] = nd(g);
  Tensor wave = dec.decode_waveform(latent);
  EXPECT_EQ(wave.shape(), (Shape{3 * 2048, 2}));
  Tensor audio = dec.decode(latent);
  EXPECT_EQ(audio.shape(), (Shape{3 * 2048 * 441 / 512, 2}));
  double ss = 0;
  for (int64_t i = 0; i < audio.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(audio.data_as<float>()[i]));
    ss += double(audio.data_as<float>()[i]) * audio.data_as<float>()[i];
  }
  EXPECT_GT(ss, 0.0);

  // Same seed: same bytes; another seed: other weights.
  const std::string again = temp_dir("sao_tiny_again");
  write_tiny_sao_vae(again, 7);
  EXPECT_EQ(read_text_file(dir + "/model.safetensors"), read_text_file(again + "/model.safetensors"));
  const std::string other = temp_dir("sao_tiny_other");
  write_tiny_sao_vae(other, 8);
  EXPECT_NE(read_text_file(dir + "/model.safetensors"), read_text_file(other + "/model.safetensors"));
}

TEST(OobleckTiny, SameBytesForAnyThreadCount) {
  const std::string dir = temp_dir("sao_threads");
  write_tiny_sao_vae(dir, 3);
  Tensor latent = Tensor::zeros({2, 64}, DType::F32);
  for (int64_t i = 0; i < latent.numel(); ++i) latent.data_as<float>()[i] = std::sin(0.37f * static_cast<float>(i));
  Tensor out[2];
  for (int threads : {1, 2}) {
    // Each backend is made right before its run: its constructor sets the process-wide OpenMP count.
    auto be = make_cpu_backend(threads);
    out[threads - 1] = OobleckDecoder::load(dir, *be).decode(latent);
  }
  ASSERT_EQ(out[0].nbytes(), out[1].nbytes());
  EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].nbytes()), 0);
}

TEST(OobleckTiny, BindingIsStrict) {
  const std::string dir = temp_dir("sao_strict");
  write_tiny_sao_vae(dir, 1);
  auto be = make_cpu_backend(1);
  auto load = [&](const std::string& d) { return [d, &be] { OobleckDecoder::load(d, *be); }; };
  // Tensors outside pretransform.model. are ignored.
  EXPECT_NO_THROW(OobleckDecoder::load(
      edited_copy(dir, "sao_other", "", {"conditioner.x", Tensor::zeros({2}, DType::F32)}), *be));
  EXPECT_TRUE(throws_with(
      load(edited_copy(dir, "sao_missing", "pretransform.model.decoder.layers.3.layers.1.bias", {})),
      {"model.safetensors", "1 missing", "decoder.layers.3.layers.1.bias"}));
  EXPECT_TRUE(throws_with(load(edited_copy(dir, "sao_enc_missing", "pretransform.model.encoder.layers.7.weight_g", {})),
                          {"1 missing", "encoder.layers.7.weight_g"}));
  EXPECT_TRUE(throws_with(
      load(edited_copy(dir, "sao_unexpected", "",
                       {"pretransform.model.bottleneck.scale", Tensor::zeros({2}, DType::F32)})),
      {"1 unexpected", "pretransform.model.bottleneck.scale"}));
  EXPECT_TRUE(throws_with(
      load(edited_copy(dir, "sao_shape", "pretransform.model.encoder.layers.0.bias",
                       {"pretransform.model.encoder.layers.0.bias", Tensor::zeros({5}, DType::F32)})),
      {"wrong shape", "encoder.layers.0.bias", "[4]", "[5]"}));
  EXPECT_TRUE(throws_with(load(temp_dir("sao_empty")), {"model_config.json"}));
}

TEST(OobleckTiny, RejectsBadLatent) {
  const std::string dir = temp_dir("sao_latent");
  write_tiny_sao_vae(dir, 2);
  auto be = make_cpu_backend(1);
  OobleckDecoder dec = OobleckDecoder::load(dir, *be);
  EXPECT_TRUE(throws_with([&] { dec.decode(Tensor::zeros({3, 32}, DType::F32)); }, {"audio decode", "[L, 64]"}));
  EXPECT_TRUE(throws_with([&] { dec.decode(Tensor::zeros({3, 64}, DType::BF16)); }, {"audio decode", "f32"}));
}

}  // namespace
}  // namespace magi2::test
