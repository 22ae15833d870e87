// FlowUniPC against the official golden fixtures (golden/dit_tiny/sampler.safetensors,
// README section "sampler.safetensors"): bit-identical schedules, the synthetic
// 100-step trajectory, and the 6-step CFG + two-scheduler loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "io/safetensors.h"
#include "pipeline/cfg.h"
#include "pipeline/flow_unipc.h"
#include "util/testing.h"

namespace magi2 {
namespace {

std::shared_ptr<SafetensorsFile> open_sampler() {
  return SafetensorsFile::open(test::golden_dir() + "/dit_tiny/sampler.safetensors");
}

// Row r of a [R, ...] tensor as a contiguous tensor of shape [...] (the leading dim dropped).
Tensor row(const Tensor& t, int64_t r) {
  Tensor s = t.slice_rows(r, r + 1);
  Shape shp(t.shape().begin() + 1, t.shape().end());
  return s.clone().reshape(shp);
}

// max|a-b| / max|b| (the "relative max-norm" of the golden README).
double rel_max(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double mx = 0, ref = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.get_f32(i), y = b.get_f32(i);
    mx = std::max(mx, std::fabs(x - y));
    ref = std::max(ref, std::fabs(y));
  }
  return ref > 0 ? mx / ref : mx;
}

void expect_schedule(const Tensor& ts, const Tensor& sig, int steps) {
  FlowUniPC s;
  s.set_timesteps(steps, 7.0);
  ASSERT_EQ(ts.numel(), steps);
  ASSERT_EQ(sig.numel(), steps + 1);
  ASSERT_EQ(ts.dtype(), DType::I64);
  ASSERT_EQ(sig.dtype(), DType::F32);
  const int64_t* gt = ts.data_as<int64_t>();
  const float* gs = sig.data_as<float>();
  for (int i = 0; i < steps; ++i) EXPECT_EQ(s.timesteps()[i], gt[i]) << "timestep " << i;
  for (int i = 0; i <= steps; ++i) {
    uint32_t a, b;
    std::memcpy(&a, &s.sigmas()[i], 4);
    std::memcpy(&b, &gs[i], 4);
    EXPECT_EQ(a, b) << "sigma " << i << ": " << s.sigmas()[i] << " vs " << gs[i];
  }
}

TEST(FlowUniPC, Schedule100BitIdentical) {
  auto f = open_sampler();
  expect_schedule(f->tensor("sched100_timesteps"), f->tensor("sched100_sigmas"), 100);
}

TEST(FlowUniPC, Schedule6BitIdentical) {
  auto f = open_sampler();
  expect_schedule(f->tensor("loop_timesteps"), f->tensor("loop_sigmas"), 6);
}

TEST(FlowUniPC, ScheduleSpecValues) {
  // Spec §5.1 / Appendix A spot values.
  FlowUniPC s;
  EXPECT_EQ(static_cast<float>(s.sigma_max()), 0.999f);
  EXPECT_EQ(s.sigma_min(), 0.0);
  s.set_timesteps(100, 7.0);
  EXPECT_EQ(s.timesteps().front(), 999);
  EXPECT_EQ(s.timesteps()[1], 998);
  EXPECT_EQ(s.timesteps().back(), 65);
  EXPECT_FLOAT_EQ(s.sigmas()[0], 0.999857008f);
  EXPECT_FLOAT_EQ(s.sigmas()[99], 0.0659754351f);
  EXPECT_EQ(s.sigmas()[100], 0.0f);
  for (int i = 1; i < 100; ++i) EXPECT_LT(s.timesteps()[i], s.timesteps()[i - 1]);
}

TEST(FlowUniPC, CoefficientsMatchAppendixA) {
  FlowUniPC s;
  s.set_timesteps(100, 7.0);
  EXPECT_EQ(s.predictor_order(0), 1);
  EXPECT_EQ(s.predictor_order(1), 2);
  EXPECT_EQ(s.predictor_order(98), 2);
  EXPECT_EQ(s.predictor_order(99), 1);
  const auto c0 = s.interval(0, 1);
  EXPECT_NEAR(c0.A, 0.998557866f, 1e-8);
  EXPECT_NEAR(c0.E_phi, -0.00144216185f, 1e-9);
  const auto c50 = s.interval(50, 2);
  EXPECT_NEAR(c50.r1, -0.99996120, 2e-5);  // GPU value; CPU/GPU differ ~1e-5 (spec §5.3)
  EXPECT_NEAR(c50.rho_c[0], 0.08333522, 2e-5);
  EXPECT_NEAR(c50.rho_c[1], 0.41999531, 2e-5);
  const auto c98 = s.interval(98, 2);
  EXPECT_NEAR(c98.rho_c[0], 0.1038963, 1e-5);
  EXPECT_NEAR(c98.rho_c[1], 0.4542336, 1e-5);
  const auto c99 = s.interval(99, 1);
  EXPECT_EQ(c99.A, 0.0f);
  EXPECT_EQ(c99.E_phi, -1.0f);
  EXPECT_EQ(c99.E_B, -1.0f);
}

TEST(FlowUniPC, Trajectory100) {
  auto f = open_sampler();
  const Tensor x0 = f->tensor("traj100_x0");
  const Tensor vs = f->tensor("traj100_model_out");
  const Tensor xs = f->tensor("traj100_samples");
  ASSERT_EQ(vs.size(0), 100);
  ASSERT_EQ(xs.size(0), 101);
  FlowUniPC s;
  s.set_timesteps(100, 7.0);
  Tensor x = x0.clone();
  EXPECT_EQ(test::compare(x, row(xs, 0)).max_abs, 0.0);
  // The contract is <= 1e-6 relative (max-norm) per step; in practice the
  // rounding model of flow_unipc.h reproduces every step bit for bit.
  double worst = 0;
  int worst_step = 0, inexact_steps = 0;
  for (int i = 0; i < 100; ++i) {
    x = s.step(row(vs, i), x);
    const Tensor ref = row(xs, i + 1);
    const double r = rel_max(x, ref);
    if (r > worst) {
      worst = r;
      worst_step = i;
    }
    EXPECT_LE(r, 1e-6) << "step " << i;
    inexact_steps += std::memcmp(x.data(), ref.data(), x.nbytes()) != 0;
  }
  EXPECT_EQ(inexact_steps, 0) << "steps not bit-identical to the official trajectory";
  std::printf("[traj100] worst relative max-norm error %.3e (step %d), %d/100 steps not "
              "bit-identical\n", worst, worst_step, inexact_steps);
  EXPECT_EQ(s.step_index(), 100);
  // Past the end of the schedule is an error, not silent garbage.
  EXPECT_THROW(s.step(row(vs, 0), x), Error);
}

TEST(FlowUniPC, TimestepLookupAndErrors) {
  FlowUniPC s;
  std::vector<float> v(4, 0.5f), x(4, 1.0f);
  EXPECT_THROW(s.step(v, x), Error);  // no schedule
  s.set_timesteps(6, 7.0);
  EXPECT_THROW(s.step_inplace(v, 12345, x), Error);  // timestep not in schedule
  std::vector<float> y(3, 1.0f);
  EXPECT_THROW(s.step(v, y), Error);  // size mismatch
  s.step_inplace(v, s.timesteps()[0], x);
  EXPECT_EQ(s.step_index(), 1);
  std::vector<float> bigger(5, 1.0f);
  EXPECT_THROW(s.step(bigger, bigger), Error);  // size changed between steps
  EXPECT_THROW(s.set_timesteps(0, 7.0), Error);
  EXPECT_THROW(s.set_timesteps(10, 0.0), Error);
  // Official quirk: a duplicated first timestep starts at its second occurrence.
  FlowUniPC d;
  d.set_timesteps(2000, 7.0);
  ASSERT_EQ(d.timesteps()[0], d.timesteps()[1]);
  std::vector<float> v2(4, 0.5f), x2(4, 1.0f);
  d.step_inplace(v2, d.timesteps()[0], x2);
  EXPECT_EQ(d.step_index(), 2);
}

TEST(FlowUniPC, Loop6WithCfg) {
  auto f = open_sampler();
  const Tensor pv = f->tensor("loop_pred_video");
  const Tensor pa = f->tensor("loop_pred_audio");
  const Tensor cv = f->tensor("loop_cfg_video");
  const Tensor ca = f->tensor("loop_cfg_audio");
  const Tensor lv = f->tensor("loop_latent_after_step");
  const Tensor la = f->tensor("loop_audio_latent_after_step");
  const Tensor ts = f->tensor("loop_timesteps");
  const int steps = static_cast<int>(ts.numel());
  ASSERT_EQ(steps, 6);

  CfgConfig cfg;  // official preview values: 5.0 / 7.0, extras off
  FlowUniPC vs, as;
  vs.set_timesteps(steps, 7.0);
  as.set_timesteps(steps, 7.0);
  Tensor video = f->tensor("loop_init_latent").clone();
  Tensor audio = f->tensor("loop_init_audio_latent").clone();
  double worst_cfg = 0, worst_v = 0, worst_a = 0, worst_abs = 0;
  int inexact = 0;
  for (int i = 0; i < steps; ++i) {
    const int64_t t = ts.data_as<int64_t>()[i];
    Tensor gv = cfg_video(row(pv, i), cfg);
    Tensor ga = cfg_audio(row(pa, i), cfg);
    const auto dcv = test::compare(gv, row(cv, i));
    const auto dca = test::compare(ga, row(ca, i));
    EXPECT_EQ(dcv.max_abs, 0.0) << "cfg video step " << i;
    EXPECT_EQ(dca.max_abs, 0.0) << "cfg audio step " << i;
    worst_cfg = std::max({worst_cfg, dcv.max_abs, dca.max_abs});
    // Step from our own CFG output (bit-equal to the golden one, checked above).
    Tensor nv = Tensor::empty(video.shape(), DType::F32);
    std::memcpy(nv.data(), video.data(), video.nbytes());
    vs.step_inplace(std::span<const float>(gv.data_as<float>(), gv.numel()), t,
                    std::span<float>(nv.data_as<float>(), nv.numel()));
    video = nv;
    audio = as.step(ga, audio);
    const double rv = rel_max(video, row(lv, i)), ra = rel_max(audio, row(la, i));
    worst_v = std::max(worst_v, rv);
    worst_a = std::max(worst_a, ra);
    worst_abs = std::max({worst_abs, test::compare(video, row(lv, i)).max_abs,
                          test::compare(audio, row(la, i)).max_abs});
    EXPECT_LE(rv, 1e-6) << "video latent step " << i;
    EXPECT_LE(ra, 1e-6) << "audio latent step " << i;
    inexact += std::memcmp(video.data(), row(lv, i).data(), video.nbytes()) != 0;
    inexact += std::memcmp(audio.data(), row(la, i).data(), audio.nbytes()) != 0;
  }
  EXPECT_EQ(inexact, 0) << "scheduler steps not bit-identical to the official loop";
  const auto dfv = test::compare(video, f->tensor("loop_final_latent"));
  const auto dfa = test::compare(audio, f->tensor("loop_final_audio_latent"));
  EXPECT_LE(dfv.max_abs, 1e-6);
  EXPECT_LE(dfa.max_abs, 1e-6);
  std::printf("[loop6] cfg max_abs %.3e; latent rel max-norm video %.3e audio %.3e, max_abs %.3e; "
              "final max_abs video %.3e audio %.3e\n",
              worst_cfg, worst_v, worst_a, worst_abs, dfv.max_abs, dfa.max_abs);
}

}  // namespace
}  // namespace magi2
