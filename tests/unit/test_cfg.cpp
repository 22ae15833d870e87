// CFG combination (pipeline/cfg.h) against the golden 6-step loop
// (golden/dit_tiny/sampler.safetensors: loop_pred_* -> loop_cfg_*), plus
// rounding order and rejection of unsupported evaluation_config flags.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "io/safetensors.h"
#include "pipeline/cfg.h"
#include "util/testing.h"

namespace magi2 {
namespace {

Tensor row(const Tensor& t, int64_t r) {
  Shape shp(t.shape().begin() + 1, t.shape().end());
  return t.slice_rows(r, r + 1).clone().reshape(shp);
}

TEST(Cfg, GoldenLoopBitExact) {
  auto f = SafetensorsFile::open(test::golden_dir() + "/dit_tiny/sampler.safetensors");
  const Tensor pv = f->tensor("loop_pred_video"), pa = f->tensor("loop_pred_audio");
  const Tensor cv = f->tensor("loop_cfg_video"), ca = f->tensor("loop_cfg_audio");
  ASSERT_EQ(pv.size(0), 6);
  const CfgConfig cfg;
  for (int64_t i = 0; i < pv.size(0); ++i) {
    const Tensor gv = cfg_video(row(pv, i), cfg);
    const Tensor ga = cfg_audio(row(pa, i), cfg);
    const Tensor rv = row(cv, i), ra = row(ca, i);
    ASSERT_EQ(gv.shape(), rv.shape());
    ASSERT_EQ(ga.shape(), ra.shape());
    EXPECT_EQ(std::memcmp(gv.data(), rv.data(), gv.nbytes()), 0) << "video step " << i;
    EXPECT_EQ(std::memcmp(ga.data(), ra.data(), ga.nbytes()), 0) << "audio step " << i;
  }
}

TEST(Cfg, RoundingOrder) {
  // diff, then scale, then add, each rounded to f32 (not a fused or
  // rearranged form such as s*c + (1-s)*u).
  const float c = 1.0f + 0x1p-23f, u = 1.0f;
  float out = 0;
  cfg_combine({&c, 1}, {&u, 1}, 5.0, {&out, 1});
  const float diff = c - u;
  const float scaled = 5.0f * diff;
  EXPECT_EQ(out, u + scaled);
  // Large-magnitude cancellation case.
  const float c2 = 3.0e7f, u2 = 2.9999998e7f;
  cfg_combine({&c2, 1}, {&u2, 1}, 7.0, {&out, 1});
  const float d2 = c2 - u2;
  const float s2 = 7.0f * d2;
  EXPECT_EQ(out, u2 + s2);
  // Scale 1 gives cond, scale 0 gives uncond.
  cfg_combine({&c2, 1}, {&u2, 1}, 1.0, {&out, 1});
  EXPECT_EQ(out, c2);
  cfg_combine({&c2, 1}, {&u2, 1}, 0.0, {&out, 1});
  EXPECT_EQ(out, u2);
}

TEST(Cfg, ShapesAndEmpty) {
  const Tensor p = Tensor::from_f32({2, 3}, {1, 2, 3, 0, 0, 0});
  const Tensor v = cfg_video(p, CfgConfig{});
  EXPECT_EQ(v.shape(), (Shape{1, 3}));
  EXPECT_EQ(v.get_f32(2), 15.0f);
  const Tensor a = cfg_audio(p, CfgConfig{});
  EXPECT_EQ(a.get_f32(1), 14.0f);
  // No audio tokens: the official sampler returns None and skips that step.
  const Tensor empty = Tensor::zeros({2, 0, 64}, DType::F32);
  EXPECT_FALSE(cfg_audio(empty, CfgConfig{}).defined());
  EXPECT_THROW(cfg_video(Tensor::zeros({3, 4}, DType::F32), CfgConfig{}), Error);
  EXPECT_THROW(cfg_video(Tensor::zeros({2, 4}, DType::BF16), CfgConfig{}), Error);
  float x[2] = {0, 0};
  EXPECT_THROW(cfg_combine({x, 2}, {x, 1}, 5.0, {x, 2}), Error);
}

void expect_rejects(const CfgConfig& cfg, const std::string& flag) {
  const Tensor p = Tensor::zeros({2, 4}, DType::F32);
  try {
    cfg_video(p, cfg);
    ADD_FAILURE() << "accepted unsupported " << flag;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

TEST(Cfg, RejectsUnsupportedFlags) {
  EXPECT_NO_THROW(validate_cfg_config(CfgConfig{}));
  CfgConfig c;
  c.use_cfg_trick = true;
  expect_rejects(c, "use_cfg_trick");
  c = CfgConfig{};
  c.use_dynamic_cfg = true;
  expect_rejects(c, "use_dynamic_cfg");
  c = CfgConfig{};
  c.use_skimmed_cfg_linear = true;
  expect_rejects(c, "use_skimmed_cfg_linear");
  c = CfgConfig{};
  c.cfg_rescale = 0.7;
  expect_rejects(c, "cfg_rescale");
  c.cfg_rescale = -1.0;
  expect_rejects(c, "cfg_rescale");
  c = CfgConfig{};
  c.video_txt_guidance_scale = std::nan("");
  expect_rejects(c, "video_txt_guidance_scale");
  // Parameters of disabled features are irrelevant, as upstream.
  c = CfgConfig{};
  c.cfg_trick_value = 99;
  c.skimmed_cfg_scale = 1;
  EXPECT_NO_THROW(validate_cfg_config(c));
}

}  // namespace
}  // namespace magi2
