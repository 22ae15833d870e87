// The tiny Wan2.2 VAE writer (models/wan22_vae/tiny.h) and the strict,
// shape-driven binder (models/wan22_vae/weights.h): the generated key layout
// equals the official file's (the golden tiny checkpoint), the release widths
// follow spec Appendix D.3, files are reproducible, and bad files give one
// combined error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "io/torch_zip.h"
#include "models/wan22_vae/encoder.h"
#include "models/wan22_vae/tiny.h"
#include "models/wan22_vae/weights.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(Wan22Tiny, SpecsMatchTheOfficialFileLayout) {
  const TorchStateDict sd = load_torch_checkpoint(golden_dir() + "/wan22_vae_encoder_tiny/Wan2.2_VAE.pth");
  const auto specs = wan22_vae_tensor_specs();
  ASSERT_EQ(specs.size(), sd.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(specs[i].first, sd.names()[i]) << "tensor " << i;
    EXPECT_EQ(specs[i].second, sd.get(sd.names()[i]).shape()) << specs[i].first;
  }
}

TEST(Wan22Tiny, ReleaseLayoutWidths) {
  Wan22VaeLayout release;
  release.dim = 160;
  release.dec_dim = 256;
  std::map<std::string, Shape> m;
  for (const auto& [n, s] : wan22_vae_tensor_specs(release)) m[n] = s;
  EXPECT_EQ(m["encoder.conv1.weight"], (Shape{160, 12, 3, 3, 3}));
  EXPECT_EQ(m["encoder.downsamples.1.downsamples.0.shortcut.weight"], (Shape{320, 160, 1, 1, 1}));
  EXPECT_EQ(m["encoder.downsamples.2.downsamples.2.time_conv.weight"], (Shape{640, 640, 3, 1, 1}));
  EXPECT_EQ(m.count("encoder.downsamples.0.downsamples.2.time_conv.weight"), 0u);
  EXPECT_EQ(m["encoder.middle.1.to_qkv.weight"], (Shape{1920, 640, 1, 1}));
  EXPECT_EQ(m["encoder.head.2.weight"], (Shape{96, 640, 3, 3, 3}));
  EXPECT_EQ(m["conv1.weight"], (Shape{96, 96, 1, 1, 1}));
  EXPECT_EQ(m["decoder.conv1.weight"], (Shape{1024, 48, 3, 3, 3}));
  EXPECT_EQ(m["decoder.head.2.weight"], (Shape{12, 256, 3, 3, 3}));
}

TEST(Wan22Tiny, WritesReproducibleBindableFile) {
  // Same seed, same bytes (the archive folder is the file stem, so equal names).
  const std::string d1 = temp_dir("wan22_tiny_1"), d2 = temp_dir("wan22_tiny_2"), dir = d1;
  write_tiny_wan22_vae(d1 + "/a.pth", 7);
  write_tiny_wan22_vae(d2 + "/a.pth", 7);
  write_tiny_wan22_vae(d2 + "/c.pth", 8);
  EXPECT_TRUE(read_all(d1 + "/a.pth") == read_all(d2 + "/a.pth"));
  const TorchStateDict other = load_torch_checkpoint(d2 + "/c.pth");
  const TorchStateDict sd = load_torch_checkpoint(dir + "/a.pth");
  const Wan22EncoderWeights w = Wan22EncoderWeights::bind(sd);
  EXPECT_NE(std::memcmp(sd.get("conv1.weight").data(), other.get("conv1.weight").data(), 96 * 96 * 4), 0)
      << "another seed gives other weights";
  EXPECT_EQ(w.dim, 8);
  EXPECT_EQ(w.z_dim, 48);
  ASSERT_EQ(w.down.size(), 4u);
  EXPECT_TRUE(w.down[1].temporal_down);
  EXPECT_FALSE(w.down[3].spatial_down);
  // Draws follow the recipe: gammas near 1, biases small.
  const Tensor& gamma = sd.get("encoder.head.0.gamma");
  double mean = 0;
  for (int64_t i = 0; i < gamma.numel(); ++i) mean += gamma.data_as<float>()[i] / gamma.numel();
  EXPECT_NEAR(mean, 1.0, 0.1);

  auto be = make_cpu_backend();
  Tensor px = Tensor::empty({3, 32, 48}, DType::F32);
  for (int64_t i = 0; i < px.numel(); ++i) px.data_as<float>()[i] = std::sin(0.37 * i);
  const Tensor lat = Wan22Encoder(w, *be).encode(px);
  ASSERT_EQ(lat.shape(), (Shape{48, 1, 2, 3}));
  for (int64_t i = 0; i < lat.numel(); ++i) ASSERT_TRUE(std::isfinite(lat.data_as<float>()[i]));
}

TEST(Wan22Tiny, BindErrorsAreOneCombinedLine) {
  const std::string dir = temp_dir("wan22_bind");
  std::vector<std::pair<std::string, Tensor>> t;
  for (const auto& [n, s] : wan22_vae_tensor_specs()) {
    if (n == "encoder.middle.1.proj.bias") continue;                                      // missing
    Shape shape = s;
    if (n == "conv1.bias") shape = {95};                                                  // wrong shape
    t.emplace_back(n, Tensor::zeros(shape, DType::F32));
  }
  t.emplace_back("encoder.extra.weight", Tensor::zeros({2}, DType::F32));               // unexpected
  t.emplace_back("model.something", Tensor::zeros({2}, DType::F32));                    // unexpected
  write_torch_checkpoint(dir + "/bad.pth", t);
  const TorchStateDict sd = load_torch_checkpoint(dir + "/bad.pth");
  EXPECT_TRUE(throws_with([&] { Wan22EncoderWeights::bind(sd); },
                          {"bad.pth", "1 missing [encoder.middle.1.proj.bias]", "2 unexpected", "encoder.extra.weight",
                           "model.something", "conv1.bias (expected [96], got [95])"}));
}

}  // namespace
}  // namespace magi2::test
