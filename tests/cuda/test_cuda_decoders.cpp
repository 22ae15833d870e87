// The codecs on the CUDA backend vs the CPU reference backend on the golden
// tiny fixtures (issue 12 item 2): the Stable Audio Open decoder
// (sa_audio_vae_tiny), the TurboVAE decoder (turbo_vae_tiny, bf16 and fp32)
// and the Wan2.2 VAE encoder (wan22_vae_encoder_tiny). Shapes come from the
// fixture files. The op kernels sum in the CPU's order, so TurboVAE (conv3d,
// RMSNorm, element-wise and layout ops) must give the CPU's bytes; Oobleck
// differs by SnakeBeta's device sine (an ulp from libm's sinf) and Wan2.2 by
// cuBLASLt's fp32 summation order in its 1x1 convs (linear), both carried
// through the network: bounds in the assertions, against the CPU backend and
// against the fixtures' exact fp32 references with the CPU backend's own
// bounds (tests/golden). The per-op rows live in tests/cuda/ops_table_codec.cpp.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "cuda/conv_runner.h"
#include "cuda_fixture.h"
#include "io/safetensors.h"
#include "models/oobleck/decoder.h"
#include "models/turbovae/decoder.h"
#include "models/wan22_vae/encoder.h"
#include "models/wan22_vae/weights.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

class CudaDecodersTest : public CudaParityTest {};

void expect_close(const std::string& what, const Tensor& got, const Tensor& ref, double rel, double max_abs) {
  ASSERT_EQ(got.shape(), ref.shape()) << what;
  const Diff d = compare(got, ref);
  std::printf("  %-40s rel_rms %.3g  max_abs %.3g  (ref rms %.3g)\n", what.c_str(), d.rel_rms, d.max_abs, d.ref_rms);
  EXPECT_LE(d.rel_rms, rel) << what;
  EXPECT_LE(d.max_abs, max_abs) << what;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}


TEST_F(CudaDecodersTest, OobleckMatchesTheCpuBackend) {
  const std::string dir = golden_dir() + "/sa_audio_vae_tiny";
  const auto io = SafetensorsFile::open(dir + "/audio_io.safetensors");
  const auto variants = SafetensorsFile::open(dir + "/reference_variants.safetensors");
  const Tensor latent = io->tensor("latent");
  const OobleckDecoder cpu = OobleckDecoder::load(dir, *cpu_);
  const OobleckDecoder gpu = OobleckDecoder::load(dir, *gpu_);
  std::map<std::string, Tensor> dc, dg;
  const Tensor ac = cpu.decode(latent, [&](const std::string& n, const Tensor& t) { dc[n] = t.clone(); });
  const Tensor ag = gpu.decode(latent, [&](const std::string& n, const Tensor& t) { dg[n] = t.clone(); });
  ASSERT_EQ(dc.size(), dg.size());
  // SnakeBeta's sine (an ulp) is the only difference; it grows through the blocks.
  for (const auto& [name, t] : dc) expect_close(name + " cuda vs cpu", dg.at(name), t, 1e-5, 1e-4);
  expect_close("audio_44k cuda vs cpu", ag, ac, 1e-5, 1e-4);
  // Against the exact fp32 reference: the CPU backend's bound (3e-6 / 4e-6, test_oobleck_golden) plus room
  // for the sine.
  expect_close("waveform cuda vs cpu_fp32", dg.at("waveform"), audio_channels_last(variants->tensor("waveform_cpu_fp32")),
               1e-5, 2e-5);
  const Tensor again = gpu.decode(latent);
  EXPECT_TRUE(same_bytes(again, ag)) << "two CUDA decodes differ";
}

// Official [1, C, T, H, W] -> channels-last [T, H, W, C] f32.
Tensor video_channels_last(const Tensor& x) {
  const int64_t C = x.size(1), n = x.numel() / C;
  Tensor y = Tensor::empty({x.size(2), x.size(3), x.size(4), C}, DType::F32);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < n; ++i) y.data_as<float>()[i * C + c] = x.get_f32(c * n + i);
  return y;
}

// [1, C, T, h, w] -> [C, T, h, w].
Tensor unbatch(const Tensor& x) { return x.reshape({x.size(1), x.size(2), x.size(3), x.size(4)}); }


TurboVaeDecoder load_turbo(const std::string& dir, Backend& be, DType dt) {
  return TurboVaeDecoder::load_files(dir + "/TurboV3-Wan22-tiny.json", dir + "/checkpoint.ckpt", be, dt);
}

TEST_F(CudaDecodersTest, TurboVaeGivesTheCpuBytes) {
  const std::string dir = golden_dir() + "/turbo_vae_tiny";
  const auto io = SafetensorsFile::open(dir + "/turbo_io.safetensors");
  const auto ref = SafetensorsFile::open(dir + "/cpu_reference.safetensors");
  for (const DType dt : {DType::BF16, DType::F32}) {
    const char* dn = dt == DType::BF16 ? "bf16" : "f32";
    TurboVaeDecoder cpu = load_turbo(dir, *cpu_, dt), gpu = load_turbo(dir, *gpu_, dt);
    std::map<std::string, Tensor> dc, dg;
    cpu.set_dump([&](const std::string& n, const Tensor& t) { dc[n] = t.clone(); });
    gpu.set_dump([&](const std::string& n, const Tensor& t) { dg[n] = t.clone(); });
    // cuDNN (the default; MAGI2_CONV_KERNEL=own: our bit-exact kernel): the bf16 convolutions sum in
    // cuDNN's order, so the bf16 decode is within bf16 rounding of the CPU instead of equal: bounded by
    // the CPU's own distance to the official frames (test_turbo_vae_golden: 0.05 / 0.2; H200: 0.019 / 0.096).
    const bool exact = dt == DType::F32 || !cuda::conv_cudnn_selected();
    for (const char* name : {"latent", "short_latent"}) {
      const Tensor latent = unbatch(io->tensor(name));
      const Tensor fc = cpu.decode_frames(latent), fg = gpu.decode_frames(latent);
      ASSERT_EQ(fg.shape(), fc.shape()) << name;
      ASSERT_EQ(dg.size(), dc.size()) << name;
      for (const auto& [n, t] : dc) {
        const int64_t d = differing_elements(dg.at(n), t);
        if (d) std::printf("  %s %s %-22s %lld of %lld elements differ\n", dn, name, n.c_str(),
                           static_cast<long long>(d), static_cast<long long>(t.numel()));
        if (exact) {
          EXPECT_EQ(d, 0) << dn << " " << name << " " << n;
        }
      }
      const int64_t df = differing_elements(fg, fc);
      std::printf("  %s %-14s frames %s: %lld differing elements\n", dn, name, shape_str(fc.shape()).c_str(),
                  static_cast<long long>(df));
      const Tensor uc = cpu.decode(latent), ug = gpu.decode(latent);
      if (exact) {
        EXPECT_EQ(df, 0) << dn << " " << name;
        EXPECT_TRUE(same_bytes(ug, uc)) << dn << " " << name << ": uint8 frames differ";
      } else {
        expect_close(std::string(name) + " frames cuda (cuDNN) vs cpu", fg, fc, 0.05, 0.2);
      }
      if (dt == DType::F32) {  // the CPU backend's bound vs the exact fp32 reference (test_turbo_vae_golden)
        const std::string rn = std::string(name) == "latent" ? "frames_cpu_fp32" : "short_frames_cpu_fp32";
        expect_close(std::string(name) + " cuda vs " + rn, fg, video_channels_last(ref->tensor(rn)), 1e-4, 1e-3);
      }
      dc.clear();
      dg.clear();
    }
  }
}

TEST_F(CudaDecodersTest, Wan22EncoderMatchesTheCpuBackend) {
  const std::string dir = golden_dir() + "/wan22_vae_encoder_tiny";
  const auto io = SafetensorsFile::open(dir + "/wan_io.safetensors");
  const auto ref = SafetensorsFile::open(dir + "/reference_variants.safetensors");
  const Wan22EncoderWeights w = Wan22EncoderWeights::load(dir + "/Wan2.2_VAE.pth");
  const Wan22Encoder cpu(w, *cpu_), gpu(w, *gpu_);
  const Tensor vin = io->tensor("vae_in");  // [1, 3, 1, H, W] (or [1, 3, H, W])
  const Tensor pixels = vin.reshape({3, vin.size(-2), vin.size(-1)}).to(DType::F32).clone();
  std::map<std::string, Tensor> dc, dg;
  const Tensor lc = cpu.encode(pixels, [&](const std::string& n, const Tensor& t) { dc[n] = t.clone(); });
  const Tensor lg = gpu.encode(pixels, [&](const std::string& n, const Tensor& t) { dg[n] = t.clone(); });
  ASSERT_EQ(dg.size(), dc.size());
  // cuBLASLt's fp32 1x1 convs sum in another order than the CPU's: fp32 rounding only.
  for (const auto& [n, t] : dc) expect_close(n + " cuda vs cpu", dg.at(n), t, 1e-5, 1e-4);
  expect_close("latent cuda vs cpu", lg, lc, 1e-5, 1e-4);
  // Against the exact fp32 reference: the CPU backend's bound (3e-6 / 1e-5, test_wan22_encoder_golden) plus
  // room for cuBLASLt's order.
  const Tensor want = ref->tensor("latent_cpu_fp32");
  expect_close("latent cuda vs cpu_fp32", lg, want.reshape(lg.shape()), 1e-5, 3e-5);
  EXPECT_TRUE(same_bytes(gpu.encode(pixels), lg)) << "two CUDA encodes differ";
}

}  // namespace
}  // namespace magi2::test
