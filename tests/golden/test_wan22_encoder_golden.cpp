// The I2V reference-image path against the official code on the tiny Wan2.2
// VAE (shared/golden/wan22_vae_encoder_tiny; README section of that name):
// PNG loading, resizepad and VideoProcessor preprocessing bit-exact (PIL
// LANCZOS), the fp32 encoder against the CPU fp32 reference and the TF32
// golden, and the whole encode_reference_image call.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "core/dtype.h"
#include "io/image.h"
#include "io/safetensors.h"
#include "io/torch_zip.h"
#include "models/wan22_vae/encoder.h"
#include "pipeline/packing.h"
#include "pipeline/reference_image.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

std::string fixture(const std::string& name) { return golden_dir() + "/wan22_vae_encoder_tiny/" + name; }

struct Fixture {
  std::shared_ptr<SafetensorsFile> io = SafetensorsFile::open(fixture("wan_io.safetensors"));
  std::shared_ptr<SafetensorsFile> ref = SafetensorsFile::open(fixture("reference_variants.safetensors"));
  TorchStateDict sd = load_torch_checkpoint(fixture("Wan2.2_VAE.pth"));
  Wan22EncoderWeights weights = Wan22EncoderWeights::bind(sd);
  static Fixture& get() {
    static Fixture f;
    return f;
  }
};

// Official [1, C, 1, H, W] (or [1, C, H, W]) -> channels-last [1, H, W, C].
Tensor to_channels_last(const Tensor& t) {
  const int64_t c = t.size(1), h = t.size(-2), w = t.size(-1);
  Tensor out = Tensor::empty({1, h, w, c}, DType::F32);
  const Tensor src = t.to(DType::F32);
  const float* s = src.data_as<float>();
  float* d = out.data_as<float>();
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t p = 0; p < h * w; ++p) d[p * c + ch] = s[ch * h * w + p];
  return out;
}

bool bytes_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

int64_t count_diff_u8(const Tensor& a, const Tensor& b) {
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) n += a.data_as<uint8_t>()[i] != b.data_as<uint8_t>()[i];
  return n;
}

Diff report(const std::string& what, const Tensor& got, const Tensor& ref) {
  const Diff d = compare(got, ref);
  std::printf("  %-22s rel_rms %.3g  max_abs %.3g  (ref rms %.3f)\n", what.c_str(), d.rel_rms, d.max_abs, d.ref_rms);
  return d;
}

TEST(Wan22Preprocess, PngLoadsAsOfficial) {
  Fixture& f = Fixture::get();
  const Tensor rgb = load_image_rgb(fixture("ref_image.png"));
  EXPECT_TRUE(bytes_equal(rgb, f.io->tensor("loaded_rgb_u8")));
}

TEST(Wan22Preprocess, ResizepadAndVideoProcessorBitExact) {
  Fixture& f = Fixture::get();
  const Tensor rgb = f.io->tensor("loaded_rgb_u8");
  const ReferenceBox box = reference_box(rgb.size(1), rgb.size(0), /*gen_width=*/128, /*gen_height=*/64);
  EXPECT_EQ(box.width, 128);
  EXPECT_EQ(box.height, 67);
  const Tensor canvas = resizepad(rgb.clone(), box.height, box.width);
  const Tensor want_canvas = f.io->tensor("canvas_u8");
  ASSERT_EQ(canvas.shape(), want_canvas.shape());
  EXPECT_EQ(count_diff_u8(canvas, want_canvas), 0) << "canvas pixels differ from PIL";

  const Tensor pixels = preprocess_reference_pixels(want_canvas.clone(), box.height, box.width);
  const Tensor want_pixels = f.io->tensor("pixels").reshape({3, 64, 128});
  EXPECT_TRUE(bytes_equal(pixels, want_pixels)) << "pixels differ: rel " << compare(pixels, want_pixels).rel_rms;

  Tensor vae_in = pixels.clone();
  for (int64_t i = 0; i < vae_in.numel(); ++i) vae_in.data_as<float>()[i] = round_bf16(vae_in.data_as<float>()[i]);
  EXPECT_TRUE(bytes_equal(vae_in, f.io->tensor("vae_in").reshape({3, 64, 128})));
}

TEST(Wan22Preprocess, BoxesAndSizeErrors) {
  // Portrait and square images get th = max_len (spec §1.3 step 2).
  EXPECT_EQ(reference_box(1080, 1920, 896, 512).width, 504);
  EXPECT_EQ(reference_box(1080, 1920, 896, 512).height, 896);
  EXPECT_EQ(reference_box(500, 500, 448, 256).width, 448);
  Tensor strip = Tensor::zeros({3, 1000, 3}, DType::U8);  // 1000x3: canvas 448x1 floors to 0 rows
  const ReferenceBox b = reference_box(1000, 3, 448, 256);
  EXPECT_EQ(b.height, 1);
  const Tensor canvas = resizepad(strip, b.height, b.width);
  EXPECT_TRUE(throws_with([&] { preprocess_reference_pixels(canvas, b.height, b.width); }, {"floors to", "448x0"}));
  EXPECT_TRUE(throws_with([&] { resizepad(strip, 0, 448); }, {"canvas 448x0", "aspect ratio"}));
}

TEST(Wan22Encoder, BindsTinyCheckpointFromShapes) {
  const Wan22EncoderWeights& w = Fixture::get().weights;
  EXPECT_EQ(w.dim, 8);
  EXPECT_EQ(w.z_dim, 48);
  ASSERT_EQ(w.down.size(), 4u);
  const int64_t outs[4] = {8, 16, 32, 32};
  const bool spatial[4] = {true, true, true, false}, temporal[4] = {false, true, true, false};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(w.down[i].out_dim, outs[i]);
    EXPECT_EQ(w.down[i].res.size(), 2u);
    EXPECT_EQ(w.down[i].spatial_down, spatial[i]);
    EXPECT_EQ(w.down[i].temporal_down, temporal[i]);
  }
}

TEST(Wan22Encoder, IntermediatesAndLatentMatchOfficial) {
  Fixture& f = Fixture::get();
  auto be = make_cpu_backend();
  const Wan22Encoder enc(f.weights, *be);
  std::map<std::string, Tensor> got;
  const Tensor latent = enc.encode(f.io->tensor("vae_in").reshape({3, 64, 128}).clone(),
                                   [&](const std::string& n, const Tensor& x) { got[n] = x.clone(); });
  // vs the TF32 golden (README: exact fp32 is 7.5e-4 / 1.9e-3 away from it at the
  // latent; measured here 1.8e-4 (enc_conv1) .. 8.8e-4 (mu_logvar)).
  const char* names[] = {"enc_conv1", "enc_down0", "enc_down1", "enc_down2", "enc_down3", "enc_mid0",
                         "enc_mid1",  "enc_mid2",  "enc_head",  "mu_logvar", "latent"};
  for (const char* n : names) {
    ASSERT_TRUE(got.count(n)) << n;
    const Diff d = report(std::string(n) + " vs golden", got[n], to_channels_last(f.io->tensor(n)));
    EXPECT_LE(d.rel_rms, 1.5e-3) << n;
  }
  // vs the exact fp32 references (README recommends rel_rms <= ~1e-5; measured
  // 7.8e-7 (mu_logvar) and 6.9e-7 / max 2.3e-6 (latent), as close as the
  // official GPU-without-TF32 run is to the CPU one).
  const Diff dm = report("mu_logvar vs cpu_fp32", got["mu_logvar"], to_channels_last(f.ref->tensor("mu_logvar_cpu_fp32")));
  EXPECT_LE(dm.rel_rms, 3e-6);
  const Tensor want = f.ref->tensor("latent_cpu_fp32").reshape({48, 1, 4, 8});
  ASSERT_EQ(latent.shape(), want.shape());
  const Diff dl = report("latent vs cpu_fp32", latent, want);
  EXPECT_LE(dl.rel_rms, 3e-6);
  EXPECT_LE(dl.max_abs, 1e-5);
  const Diff dg = report("latent vs golden", latent, f.io->tensor("latent").reshape({48, 1, 4, 8}));
  EXPECT_LE(dg.rel_rms, 1.5e-3);
  EXPECT_LE(dg.max_abs, 4e-3);
}

TEST(Wan22Encoder, ReferenceImageEndToEnd) {
  Fixture& f = Fixture::get();
  auto be = make_cpu_backend();
  const Wan22EncoderWeights weights = Wan22EncoderWeights::load(fixture("Wan2.2_VAE.pth"));  // the CLI's path
  const Wan22Encoder enc(weights, *be);
  const Tensor latent = encode_reference_image(fixture("ref_image.png"), 128, 64, enc);
  const Diff d = report("end-to-end latent", latent, f.ref->tensor("latent_cpu_fp32").reshape({48, 1, 4, 8}));
  EXPECT_LE(d.rel_rms, 3e-6);
}

// The returned latent is what packing takes as ref_image_feat (reshaped to the
// official [1, 1, 48, 1, h, w]): image token y*w + x of both branches carries
// latent[:, 0, y, x] in its first 48 columns.
TEST(Wan22Encoder, LatentFeedsPackingAsReferenceImage) {
  Fixture& f = Fixture::get();
  const Tensor latent = f.ref->tensor("latent_cpu_fp32").reshape({48, 1, 4, 8}).clone();
  PackingShapes s;
  s.latent = {.channels = 48, .frames = 2, .height = 4, .width = 8, .audio_frames = 3, .audio_channels = 64};
  s.text_channels = 64;
  s.text_len_cond = 2;
  s.text_len_uncond = 1;
  s.ref_images.push_back({latent.size(2), latent.size(3)});
  const PackingPlan plan = make_packing_plan(s);
  PackingConditioning c;
  c.text_cond = Tensor::zeros({1, 2, 64}, DType::F32);
  c.text_uncond = Tensor::zeros({1, 1, 64}, DType::F32);
  c.ref_image_feat = latent.reshape({1, 1, 48, 1, 4, 8});
  c.ref_special_tokens = Tensor::zeros({1, 1, 64}, DType::F32);
  const Tensor x = pack_static_tokens(plan, c);
  for (const BranchLayout& b : plan.branches)
    for (int64_t n = 0; n < 32; ++n)
      for (int64_t ch = 0; ch < 48; ++ch)
        ASSERT_EQ(x.data_as<float>()[(b.image_begin[0] + n) * plan.width + ch], latent.data_as<float>()[ch * 32 + n]);
}

TEST(Wan22Encoder, SameBytesForAnyThreadCount) {
  Fixture& f = Fixture::get();
  const Tensor in = f.io->tensor("vae_in").reshape({3, 64, 128}).clone();
  auto be1 = make_cpu_backend(1);
  const Tensor a = Wan22Encoder(f.weights, *be1).encode(in);
  auto be2 = make_cpu_backend(2);
  const Tensor b = Wan22Encoder(f.weights, *be2).encode(in);
  EXPECT_TRUE(bytes_equal(a, b));
}

}  // namespace
}  // namespace magi2::test
