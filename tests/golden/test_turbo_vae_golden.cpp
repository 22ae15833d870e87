// The TurboVAE decoder against the official code on the tiny random config
// (shared/golden/turbo_vae_tiny; tolerances from its README: bf16 rel_rms
// <= ~0.05 / max abs <= ~0.2 vs `frames`, fp32 <= ~1e-4 vs `frames_cpu_fp32`,
// chunk inputs and the uint8 conversion exact).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "io/safetensors.h"
#include "models/turbovae/decoder.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

std::string dir() { return golden_dir() + "/turbo_vae_tiny"; }

struct Golden {
  std::shared_ptr<SafetensorsFile> io = SafetensorsFile::open(dir() + "/turbo_io.safetensors");
  std::shared_ptr<SafetensorsFile> cpu = SafetensorsFile::open(dir() + "/cpu_reference.safetensors");
  static Golden& get() {
    static Golden g;
    return g;
  }
};

// [1, C, T, H, W] (official layout) -> [T, H, W, C] f32 (ours).
Tensor channels_last(const Tensor& x) {
  const int64_t C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  Tensor y = Tensor::empty({T, H, W, C}, DType::F32);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < T * H * W; ++i) y.data_as<float>()[i * C + c] = x.get_f32(c * T * H * W + i);
  return y;
}

// [1, C, T, H, W] -> [C, T, H, W] (drop the batch).
Tensor unbatch(const Tensor& x) { return x.reshape({x.size(1), x.size(2), x.size(3), x.size(4)}); }

Diff expect_close(const std::string& what, const Tensor& got, const Tensor& ref, double rel, double max_abs) {
  const Diff d = compare(got, ref);
  std::printf("  %-22s rel_rms %.3g  max_abs %.3g  (ref rms %.3f)\n", what.c_str(), d.rel_rms, d.max_abs, d.ref_rms);
  EXPECT_LE(d.rel_rms, rel) << what;
  EXPECT_LE(d.max_abs, max_abs) << what;
  return d;
}

TurboVaeDecoder load(Backend& be, DType dt) {
  return TurboVaeDecoder::load_files(dir() + "/TurboV3-Wan22-tiny.json", dir() + "/checkpoint.ckpt", be, dt);
}

TEST(TurboVaeGolden, ChunkPlanMatchesTheOfficialWindows) {
  const TurboChunkPlan p = plan_turbo_chunks(16, 7, 7, 4);
  EXPECT_EQ(p.pad, 5);
  ASSERT_EQ(p.chunks.size(), 3u);
  const int64_t want[3][4] = {{0, 8, 0, 4}, {6, 15, 4, 4}, {13, 21, 4, 0}};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(p.chunks[i].begin, want[i][0]);
    EXPECT_EQ(p.chunks[i].end, want[i][1]);
    EXPECT_EQ(p.chunks[i].drop_front, want[i][2]);
    EXPECT_EQ(p.chunks[i].drop_back, want[i][3]);
    EXPECT_EQ(p.chunks[i].first, i == 0);
  }
  const TurboChunkPlan s = plan_turbo_chunks(3, 7, 7, 4);  // the short clip: one padded first chunk
  EXPECT_EQ(s.pad, 4);
  ASSERT_EQ(s.chunks.size(), 1u);
  EXPECT_EQ(s.chunks[0].end, 7);
  // The release: 32 latent frames -> 5 chunks, 125 frames (spec §6.1).
  const TurboChunkPlan r = plan_turbo_chunks(32, 7, 7, 4);
  EXPECT_EQ(r.pad, 3);
  EXPECT_EQ(r.chunks.size(), 5u);
}

TEST(TurboVaeGolden, Bf16DecodeMatchesOfficial) {
  Golden& g = Golden::get();
  auto be = make_cpu_backend();
  TurboVaeDecoder dec = load(*be, DType::BF16);
  std::map<std::string, Tensor> cap;
  dec.set_dump([&](const std::string& name, const Tensor& t) { cap[name] = t.clone(); });
  const Tensor latent = unbatch(g.io->tensor("latent"));
  const Tensor frames = dec.decode_frames(latent);
  ASSERT_EQ(frames.shape(), (Shape{61, 32, 48, 3}));

  // Chunk inputs: bf16 de-normalisation, exact.
  for (int i = 0; i < 3; ++i) {
    const std::string n = "chunk" + std::to_string(i) + "_in";
    ASSERT_TRUE(cap.count(n)) << n;
    const Diff d = compare(cap[n], channels_last(g.io->tensor(n)));
    std::printf("  %-22s max_abs %.3g\n", n.c_str(), d.max_abs);
    EXPECT_EQ(d.max_abs, 0.0) << n;
  }
  // First-call intermediates: bf16 rounding differences grow through the blocks.
  expect_close("dec0_conv_in", cap["dec0_conv_in"], channels_last(g.io->tensor("dec0_conv_in")), 0.01, 0.05);
  expect_close("dec0_mid_block", cap["dec0_mid_block"], channels_last(g.io->tensor("dec0_mid_block")), 0.02, 0.1);
  expect_close("dec0_up_block0", cap["dec0_up_block0"], channels_last(g.io->tensor("dec0_up_block0")), 0.03, 0.15);
  expect_close("dec0_up_block1", cap["dec0_up_block1"], channels_last(g.io->tensor("dec0_up_block1")), 0.04, 0.2);
  expect_close("dec0_up_block3", cap["dec0_up_block3"], channels_last(g.io->tensor("dec0_up_block3")), 0.05, 0.3);
  expect_close("frames (bf16)", frames, channels_last(g.io->tensor("frames")), 0.05, 0.2);
}

TEST(TurboVaeGolden, ShortClipBf16) {
  Golden& g = Golden::get();
  auto be = make_cpu_backend();
  TurboVaeDecoder dec = load(*be, DType::BF16);
  const Tensor frames = dec.decode_frames(unbatch(g.io->tensor("short_latent")));
  ASSERT_EQ(frames.shape(), (Shape{9, 32, 48, 3}));
  expect_close("short_frames (bf16)", frames, channels_last(g.io->tensor("short_frames")), 0.05, 0.2);
}

TEST(TurboVaeGolden, Fp32DecodeMatchesCpuReference) {
  Golden& g = Golden::get();
  auto be = make_cpu_backend();
  TurboVaeDecoder dec = load(*be, DType::F32);
  expect_close("frames (fp32)", dec.decode_frames(unbatch(g.io->tensor("latent"))),
               channels_last(g.cpu->tensor("frames_cpu_fp32")), 1e-4, 1e-3);
  expect_close("short_frames (fp32)", dec.decode_frames(unbatch(g.io->tensor("short_latent"))),
               channels_last(g.cpu->tensor("short_frames_cpu_fp32")), 1e-4, 1e-3);
}

TEST(TurboVaeGolden, Uint8ConversionIsExactFromGoldenFrames) {
  Golden& g = Golden::get();
  auto be = make_cpu_backend();
  for (const char* name : {"frames", "short_frames"}) {
    const Tensor f = channels_last(g.io->tensor(name));
    Tensor u8 = Tensor::zeros(f.shape(), DType::U8);
    be->frames_to_u8({.x = f.reshape({f.numel() / 3, 3}), .y = u8.reshape({f.numel() / 3, 3})});
    const Tensor want = g.io->tensor(std::string(name) == "frames" ? "video_uint8" : "short_video_uint8");
    ASSERT_EQ(want.shape(), u8.shape());
    EXPECT_EQ(std::memcmp(u8.data(), want.data(), u8.nbytes()), 0) << name;
  }
}

TEST(TurboVaeGolden, DecodeGivesUint8Frames) {
  Golden& g = Golden::get();
  auto be = make_cpu_backend();
  TurboVaeDecoder dec = TurboVaeDecoder::load(dir(), *be);  // finds the folder's only .json
  const Tensor u8 = dec.decode(unbatch(g.io->tensor("short_latent")));
  const Tensor want = g.io->tensor("short_video_uint8");
  ASSERT_EQ(u8.shape(), want.shape());
  ASSERT_EQ(u8.dtype(), DType::U8);
  int64_t differ = 0, worst = 0;
  for (int64_t i = 0; i < u8.numel(); ++i) {
    const int64_t d = std::abs(int64_t{u8.data_as<uint8_t>()[i]} - int64_t{want.data_as<uint8_t>()[i]});
    differ += d != 0;
    worst = std::max(worst, d);
  }
  // The README: bf16-level differences move most values by a few levels.
  std::printf("  short_video_uint8      %.1f %% differ, max %lld levels\n", 100.0 * differ / u8.numel(),
              static_cast<long long>(worst));
  EXPECT_LE(worst, 16);
}

TEST(TurboVaeGolden, MissingAndMisshapedTensorsAreOneError) {
  const std::string tmp = temp_dir("turbo_bad");
  TorchStateDict sd = load_torch_checkpoint(dir() + "/checkpoint.ckpt", "ema_state_dict");
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const auto& n : sd.names()) {
    if (n == "module.decoder.conv_out.conv.bias") continue;  // missing
    if (n == "module.decoder.conv_in.conv.bias") {
      ts.emplace_back(n, Tensor::zeros({7}, DType::F32));  // wrong shape
      continue;
    }
    ts.emplace_back(n, sd.get(n));
  }
  write_torch_checkpoint(tmp + "/checkpoint.ckpt", ts, "state_dict");
  auto be = make_cpu_backend(1);
  EXPECT_TRUE(throws_with([&] { TurboVaeDecoder::load_files(dir() + "/TurboV3-Wan22-tiny.json", tmp + "/checkpoint.ckpt", *be); },
                          {tmp + "/checkpoint.ckpt", "missing decoder.conv_out.conv.bias",
                           "decoder.conv_in.conv.bias (expected [24] float, got [7] F32)"}));
}

}  // namespace
}  // namespace magi2::test
