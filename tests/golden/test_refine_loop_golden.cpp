// The refiner stage (pipeline/refine.h) against the official stage on the tiny
// fixture (tests/fixtures/refiner_tiny): the zero-SNR table, the trilinear
// resample, the re-noise, and the 5-step loop free-running and teacher-forced.
// Step counts and shapes come from the fixture files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/magi2_refiner/refiner.h"
#include "ops/ops.h"
#include "pipeline/refine.h"
#include "util/testing.h"

namespace magi2 {
namespace {

struct Fixture {
  RefinerConfig config;
  Checkpoint ckpt;
  RefinerWeights weights;
  std::shared_ptr<SafetensorsFile> io;
  static Fixture& get() {
    static Fixture f = [] {
      const std::string dir = test::fixture_dir() + "/refiner_tiny";
      Fixture x{RefinerConfig::from_file(dir + "/config.json"), Checkpoint::open(dir + "/refiner"), {}, nullptr};
      x.weights = RefinerWeights::bind(x.ckpt, x.config.arch);
      x.io = SafetensorsFile::open(dir + "/refiner_io.safetensors");
      return x;
    }();
    return f;
  }
  RefineRequest request() const {
    RefineRequest r;
    r.preview_latent = io->tensor("preview_latent");
    r.text_cond = io->tensor("txt_feat");
    r.text_uncond = io->tensor("null_txt_feat");
    const Tensor lat = io->tensor("interp_latent");
    r.height_px = lat.size(3) * config.eval.vae_stride[1];
    r.width_px = lat.size(4) * config.eval.vae_stride[2];
    r.renoise = io->tensor("renoise_noise");
    r.num_steps = static_cast<int>(io->tensor("loop_timesteps").numel());
    return r;
  }
};

TEST(RefineLoopGolden, ZeroSnrTableAndResample) {
  auto& f = Fixture::get();
  const std::vector<float> s = zero_snr_sigmas();
  const Tensor gold = f.io->tensor("sigmas");
  ASSERT_EQ(static_cast<int64_t>(s.size()), gold.numel());
  EXPECT_LT(test::compare(Tensor::from_f32({gold.numel()}, s), gold).max_abs, 1e-6);
  const Tensor want = f.io->tensor("interp_latent");
  const Tensor got =
      resample_trilinear_align_corners(f.io->tensor("preview_latent"), want.size(2), want.size(3), want.size(4));
  EXPECT_LT(test::compare(got, want).max_abs, 1e-5);
}

TEST(RefineLoopGolden, TeacherForcedStepsAndFreeRun) {
  auto& f = Fixture::get();
  auto be = make_cpu_backend();
  Refiner model(f.config.arch, f.weights, *be);
  RefineRequest req = f.request();
  const int steps = req.num_steps;
  // Free run: the re-noised start, then every step on our own latents.
  // Bounds from the forward's bf16 floor (official bf16 vs its fp32 re-run,
  // fixture fwd_out_fp32): twice it per teacher-forced step; the free run
  // compounds five steps of it (observed 3x), so five times it.
  const double floor = test::compare(f.io->tensor("fwd_out"), f.io->tensor("fwd_out_fp32")).rel_rms;
  const RefineResult free_run = refine_latents(model, f.config, req);
  const double free_err = test::compare(free_run.latent, f.io->tensor("loop_final_latent")).rel_rms;
  std::printf("free run rel_rms %.5f, forward bf16 floor %.5f\n", free_err, floor);
  EXPECT_LT(free_err, 5 * floor);
  ASSERT_EQ(static_cast<int>(free_run.step_ms.size()), steps);
  // Teacher forcing: each step starts from the official latent of the step before.
  std::vector<double> step_err(steps, 0);
  req.on_step = [&](int s, Tensor& latent) {
    const Tensor gold = f.io->tensor("loop_s" + std::to_string(s) + "_latent_out");
    step_err[s] = test::compare(latent, gold).rel_rms;
    latent = gold.to(DType::F32);
  };
  refine_latents(model, f.config, req);
  for (int s = 0; s < steps; ++s) EXPECT_LT(step_err[s], 2 * floor) << "step " << s;
}

TEST(RefineLoopGolden, RejectsABadLatent) {
  auto& f = Fixture::get();
  auto be = make_cpu_backend();
  Refiner model(f.config.arch, f.weights, *be);
  RefineRequest req = f.request();
  req.preview_latent = Tensor::zeros({1, 3, 2, 2, 2}, DType::F32);
  EXPECT_TRUE(test::throws_with([&] { refine_latents(model, f.config, req); }, {"refiner input latent"}));
}

}  // namespace
}  // namespace magi2
