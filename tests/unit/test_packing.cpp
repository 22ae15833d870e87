// Token packing / unpacking against the official MAGI-2 data proxy
// (golden dit_tiny/dit_io.safetensors, produced by the official
// prepare_model_input -> process_input -> forward -> process_output path).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "pipeline/packing.h"
#include "pipeline/time_embedding.h"
#include "util/testing.h"

namespace magi2 {
namespace {

std::shared_ptr<SafetensorsFile> dit_io() {
  static std::shared_ptr<SafetensorsFile> f =
      SafetensorsFile::open(test::golden_dir() + "/dit_tiny/dit_io.safetensors");
  return f;
}

// Number of elements whose bytes differ (exact comparison, -0 != +0).
int64_t count_bit_diffs(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(shape_str(a.shape()), shape_str(b.shape()));
  EXPECT_EQ(a.dtype(), b.dtype());
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return -1;
  const size_t es = dtype_size(a.dtype());
  const auto* pa = static_cast<const uint8_t*>(a.data());
  const auto* pb = static_cast<const uint8_t*>(b.data());
  int64_t diffs = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(pa + i * es, pb + i * es, es) != 0) ++diffs;
  return diffs;
}

// Distance in units in the last place between two finite floats.
int64_t ulp_distance(float a, float b) {
  auto key = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  return std::llabs(key(a) - key(b));
}

// Shapes of the golden request, read from the raw_* inputs.
PackingShapes golden_shapes(bool with_image) {
  auto f = dit_io();
  const Tensor lat = f->tensor("raw_latent");
  const Tensor aud = f->tensor("raw_audio_latent");
  const Tensor txt = f->tensor("raw_txt_feat");
  const Tensor null_txt = f->tensor("raw_null_txt_feat");
  PackingShapes s;
  s.latent.channels = lat.size(1);
  s.latent.frames = lat.size(2);
  s.latent.height = lat.size(3);
  s.latent.width = lat.size(4);
  s.latent.audio_frames = aud.size(1);
  s.latent.audio_channels = aud.size(2);
  s.text_channels = txt.size(2);
  s.text_len_cond = txt.size(1);
  s.text_len_uncond = null_txt.size(1);
  if (with_image) {
    const Tensor len = f->tensor("raw_ref_image_feat_len");  // [1, M, 2] i64 (h, w)
    for (int64_t k = 0; k < len.size(1); ++k)
      s.ref_images.push_back({len.data_as<int64_t>()[2 * k], len.data_as<int64_t>()[2 * k + 1]});
  }
  return s;
}

PackingConditioning golden_conditioning(bool with_image) {
  auto f = dit_io();
  PackingConditioning c;
  c.text_cond = f->tensor("raw_txt_feat");
  c.text_uncond = f->tensor("raw_null_txt_feat");
  if (with_image) {
    c.ref_image_feat = f->tensor("raw_ref_image_feat");
    c.ref_special_tokens = f->tensor("raw_ref_image_special_token");
  }
  return c;
}

float golden_timestep() {
  return static_cast<float>(dit_io()->tensor("fwd_timestep").data_as<int64_t>()[0]);
}

void check_time_emb(const Tensor& mine, const Tensor& ref, const char* tag) {
  ASSERT_EQ(shape_str(mine.shape()), shape_str(ref.shape()));
  int64_t max_ulp = 0, diffs = 0;
  double max_abs = 0;
  for (int64_t i = 0; i < mine.numel(); ++i) {
    const float a = mine.data_as<float>()[i], b = ref.data_as<float>()[i];
    const int64_t u = ulp_distance(a, b);
    if (u != 0) ++diffs;
    max_ulp = std::max(max_ulp, u);
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(a - b)));
  }
  const test::Diff d = test::compare(mine, ref);
  std::printf("[%s time_emb] %lld/%lld elements differ, max %lld ulp, max_abs %.3g, rel_rms %.3g\n",
              tag, static_cast<long long>(diffs), static_cast<long long>(mine.numel()),
              static_cast<long long>(max_ulp), max_abs, d.rel_rms);
  // Arguments are bit-identical (CUDA expf frequency table); what is left is CUDA
  // cosf/sinf vs correctly rounded cos/sin (CUDA bound 2 ulp, observed 1 ulp).
  EXPECT_LE(max_ulp, 2) << tag;
  EXPECT_LT(max_abs, 2.5e-7) << tag;
}

void check_golden_packing(bool with_image) {
  const char* p = with_image ? "i2v_" : "t2v_";
  auto f = dit_io();
  const PackingPlan plan = make_packing_plan(golden_shapes(with_image));
  const PackedDitInputs in = pack_dit_inputs(plan, f->tensor("raw_latent"),
                                             f->tensor("raw_audio_latent"),
                                             golden_conditioning(with_image), golden_timestep());
  const std::string s(p);
  EXPECT_EQ(count_bit_diffs(in.x, f->tensor(s + "in_x")), 0) << s << "in_x";
  EXPECT_EQ(count_bit_diffs(in.coords, f->tensor(s + "in_coords")), 0) << s << "in_coords";
  EXPECT_EQ(count_bit_diffs(in.modality, f->tensor(s + "in_modality")), 0) << s << "in_modality";
  EXPECT_EQ(count_bit_diffs(in.cu_seqlens, f->tensor(s + "in_cu_seqlens")), 0)
      << s << "in_cu_seqlens";
  const int32_t* cu = in.cu_seqlens.data_as<int32_t>();
  EXPECT_EQ(in.max_seqlen, std::max(cu[1] - cu[0], cu[2] - cu[1]));
  check_time_emb(in.time_emb, f->tensor(s + "in_time_emb"), p);
}

TEST(Packing, T2VMatchesOfficial) {
  const PackingPlan plan = make_packing_plan(golden_shapes(false));
  EXPECT_EQ(plan.total_tokens, 127);  // README: 65 + 62
  EXPECT_EQ(plan.branches[0].length, 65);
  EXPECT_EQ(plan.width, 64);
  check_golden_packing(false);
}

TEST(Packing, I2VMatchesOfficial) {
  const PackingPlan plan = make_packing_plan(golden_shapes(true));
  EXPECT_EQ(plan.total_tokens, 159);  // README: 81 + 78
  EXPECT_EQ(plan.branches[0].length, 81);
  check_golden_packing(true);
}

TEST(Packing, UnpackMatchesOfficial) {
  auto f = dit_io();
  for (bool with_image : {false, true}) {
    const std::string p = with_image ? "i2v_" : "t2v_";
    const PackingPlan plan = make_packing_plan(golden_shapes(with_image));
    const UnpackedPrediction u = unpack_output(plan, f->tensor(p + "out"));
    EXPECT_EQ(count_bit_diffs(u.video, f->tensor(p + "out_video")), 0) << p << "out_video";
    EXPECT_EQ(count_bit_diffs(u.audio, f->tensor(p + "out_audio")), 0) << p << "out_audio";
  }
}

TEST(Packing, UnpackAcceptsWiderStridedOutput) {
  auto f = dit_io();
  const PackingPlan plan = make_packing_plan(golden_shapes(false));
  const Tensor out = f->tensor("t2v_out");
  Tensor wide = Tensor::zeros({out.size(0), 80}, DType::F32);
  for (int64_t r = 0; r < out.size(0); ++r)
    std::memcpy(wide.data_as<float>() + r * 80, out.data_as<float>() + r * 64, 64 * sizeof(float));
  const UnpackedPrediction u = unpack_output(plan, wide.slice_cols(0, 70));
  EXPECT_EQ(count_bit_diffs(u.video, f->tensor("t2v_out_video")), 0);
  EXPECT_EQ(count_bit_diffs(u.audio, f->tensor("t2v_out_audio")), 0);
}

// The per-step path (static rows once, latents + time every step) must give the
// same tensors as a fresh one-shot pack.
TEST(Packing, PerStepRepackEqualsFreshPack) {
  auto f = dit_io();
  const PackingPlan plan = make_packing_plan(golden_shapes(true));
  const PackingConditioning cond = golden_conditioning(true);
  const Tensor lat = f->tensor("raw_latent");
  const Tensor aud = f->tensor("raw_audio_latent");

  Tensor x = pack_static_tokens(plan, cond);
  Tensor temb = Tensor::empty({plan.total_tokens, kTimeChannels}, DType::F32);
  // A different "previous step" first, then the golden step into the same buffers.
  Tensor lat2 = lat.clone(), aud2 = aud.clone();
  for (int64_t i = 0; i < lat2.numel(); ++i) lat2.data_as<float>()[i] *= -3.0f;
  for (int64_t i = 0; i < aud2.numel(); ++i) aud2.data_as<float>()[i] += 1.0f;
  pack_latent_tokens(plan, lat2, aud2, x);
  fill_time_embedding(plan, 999.0f, temb);
  EXPECT_GT(count_bit_diffs(x, f->tensor("i2v_in_x")), 0);
  pack_latent_tokens(plan, lat, aud, x);
  fill_time_embedding(plan, golden_timestep(), temb);
  EXPECT_EQ(count_bit_diffs(x, f->tensor("i2v_in_x")), 0);
  EXPECT_EQ(count_bit_diffs(temb, pack_time_embedding(plan, golden_timestep())), 0);

  // Unbatched inputs are accepted too.
  Tensor x3 = pack_static_tokens(plan, cond);
  pack_latent_tokens(plan, lat.reshape({48, 2, 4, 6}), aud.reshape({10, 64}), x3);
  EXPECT_EQ(count_bit_diffs(x3, f->tensor("i2v_in_x")), 0);
}

TEST(Packing, BranchesDifferOnlyInText) {
  const PackingPlan plan = make_packing_plan(golden_shapes(true));
  const BranchLayout& b0 = plan.branches[0];
  const BranchLayout& b1 = plan.branches[1];
  EXPECT_EQ(b1.begin, b0.length);
  EXPECT_EQ(b0.length - b0.text_len, b1.length - b1.text_len);
  const int32_t* m = plan.modality.data_as<int32_t>();
  EXPECT_EQ(m[b0.special_row[0]], 2);
  EXPECT_EQ(m[b1.image_begin[0]], 0);
  const float* c = plan.coords.data_as<float>() + b1.special_row[0] * 9;
  const float expect[9] = {4, -1, -1, 1, 5, 3, 1, 5, 3};  // T + 2 = 4, image 5x3
  for (int i = 0; i < 9; ++i) EXPECT_EQ(c[i], expect[i]) << i;
}

// Special tokens follow the text dtype (official `.to(text dtype)`); several
// images are placed one latent step apart after the video.
TEST(Packing, MultipleImagesAndBf16Text) {
  PackingShapes s;
  s.latent = {4, 2, 2, 3, 5, 6};  // Cv 4, T 2, H 2, W 3, La 5, Ca 6
  s.text_channels = 8;
  s.text_len_cond = 2;
  s.text_len_uncond = 1;
  s.ref_images = {{2, 2}, {1, 3}};
  const PackingPlan plan = make_packing_plan(s);
  EXPECT_EQ(plan.width, 8);
  EXPECT_EQ(plan.branches[0].length, 12 + 5 + 2 + (1 + 4) + (1 + 3));
  PackingConditioning c;
  c.text_cond = Tensor::zeros({2, 8}, DType::BF16);
  c.text_uncond = Tensor::zeros({1, 1, 8}, DType::BF16);
  c.ref_image_feat = Tensor::zeros({2, 4, 1, 2, 3}, DType::F32);  // padded 2x3 grid
  for (int64_t i = 0; i < c.ref_image_feat.numel(); ++i)
    c.ref_image_feat.data_as<float>()[i] = static_cast<float>(i);
  c.ref_special_tokens = Tensor::zeros({2, 8}, DType::F32);
  c.ref_special_tokens.data_as<float>()[0] = 1.0f + 1.0f / 1024.0f;  // not a bf16 value
  const Tensor x = pack_static_tokens(plan, c);
  for (const BranchLayout& br : plan.branches) {
    EXPECT_EQ(x.data_as<float>()[br.special_row[0] * 8], 1.0f);  // rounded to bf16
    // Image 0 (h,w = 2,2) takes the first 4 tokens of its 2x3 grid: token n, channel ch
    // = element ch*6 + n.
    EXPECT_EQ(x.data_as<float>()[(br.image_begin[0] + 3) * 8 + 1], 6.0f + 3.0f);
    // Image 1 starts at element 24 (4 channels x 6).
    EXPECT_EQ(x.data_as<float>()[(br.image_begin[1] + 2) * 8 + 0], 24.0f + 2.0f);
    const float* sp = plan.coords.data_as<float>() + br.special_row[1] * 9;
    EXPECT_EQ(sp[0], 2.0f + 2.0f + 1.0f);  // T + 2 + k
    EXPECT_EQ(sp[4], 1.0f);
    EXPECT_EQ(sp[5], 3.0f);
    const float* img = plan.coords.data_as<float>() + (br.image_begin[1] + 2) * 9;
    const float img_expect[9] = {5, 0, 2, 1, 1, 3, 1, 1, 3};
    for (int i = 0; i < 9; ++i) EXPECT_EQ(img[i], img_expect[i]) << i;
  }
  // Text coords of the uncond branch: t = -1, shape (1,1,1), ref (1,1,1).
  const float* tc = plan.coords.data_as<float>() + plan.branches[1].text_begin * 9;
  const float text_expect[9] = {-1, 0, 0, 1, 1, 1, 1, 1, 1};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(tc[i], text_expect[i]) << i;
}

TEST(TimeEmbedding, MatchesSpecAppendixB) {
  // GPU reciprocal rounding (spec pipeline §4.5): 999 -> 0.999000072, pos 999.000061.
  EXPECT_EQ(normalize_timestep(999.0f), 0.999000072f);
  EXPECT_EQ(normalize_timestep(999.0f) * 1000.0f, 999.000061f);
  float e[64];
  sinusoidal_embedding(normalize_timestep(999.0f), 64, e);
  const float cos_ref[3] = {0.99965149f, 0.12517056f, -0.84403551f};
  const float sin_ref[3] = {-0.02639974f, 0.99213523f, 0.53628737f};
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(e[i], cos_ref[i], 2e-7f) << i;
    EXPECT_NEAR(e[32 + i], sin_ref[i], 2e-7f) << i;
  }
  sinusoidal_embedding(0.0f, 64, e);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(e[i], 1.0f);
    EXPECT_EQ(e[32 + i], 0.0f);
  }
  float odd[5];
  sinusoidal_embedding(0.5f, 5, odd);
  EXPECT_EQ(odd[4], 0.0f);
  EXPECT_THROW(sinusoidal_embedding(0.5f, 0, odd), Error);
}

TEST(LatentShape, ReleaseResolutions) {
  const LatentShape s272 = latent_shape_for_resolution("272p");
  EXPECT_EQ(s272.channels, 48);
  EXPECT_EQ(s272.frames, 32);
  EXPECT_EQ(s272.height, 16);
  EXPECT_EQ(s272.width, 28);
  EXPECT_EQ(s272.audio_frames, 250);
  EXPECT_EQ(s272.audio_channels, 64);
  const LatentShape s540 = latent_shape_for_resolution("540p");
  EXPECT_EQ(s540.frames, 32);
  EXPECT_EQ(s540.height, 32);
  EXPECT_EQ(s540.width, 56);
  const LatentShape p = latent_shape_for_pixels(896, 512);
  EXPECT_EQ(p.height, 32);
  EXPECT_EQ(p.width, 56);

  // Token counts of spec pipeline §3.4 (no text -> 14 586 / 57 594 per branch).
  PackingShapes sh;
  sh.latent = s272;
  sh.text_len_cond = 11;
  sh.text_len_uncond = 7;
  PackingPlan plan = make_packing_plan(sh);
  EXPECT_EQ(plan.branches[0].length, 14586 + 11);
  EXPECT_EQ(plan.branches[1].length, 14586 + 7);
  EXPECT_EQ(plan.width, 5120);
  sh.latent = s540;
  sh.text_len_cond = 400;
  sh.text_len_uncond = 400;
  sh.ref_images = {{32, 56}};
  plan = make_packing_plan(sh);
  EXPECT_EQ(plan.total_tokens, 115988 + 2 * (1 + 32 * 56));
  // Audio coords: (k, 0, 0, 250, 1, 1, 32, 1, 1); special token t = 34.
  const float* a = plan.coords.data_as<float>() + (plan.branches[0].audio_begin + 249) * 9;
  const float audio_expect[9] = {249, 0, 0, 250, 1, 1, 32, 1, 1};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(a[i], audio_expect[i]) << i;
  EXPECT_EQ(plan.coords.data_as<float>()[plan.branches[1].special_row[0] * 9], 34.0f);
}

// Expects an Error whose message contains `needle`.
template <typename F>
void expect_error(F&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no Error thrown, expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    std::printf("[error] %s\n", msg.c_str());
  }
}

TEST(Packing, ErrorsNameTheBadInput) {
  auto f = dit_io();
  const PackingPlan t2v = make_packing_plan(golden_shapes(false));
  const PackingPlan i2v = make_packing_plan(golden_shapes(true));
  const Tensor lat = f->tensor("raw_latent");
  const Tensor aud = f->tensor("raw_audio_latent");
  const PackingConditioning cond = golden_conditioning(false);

  expect_error([] { latent_shape_for_resolution("720p"); }, "720p");
  expect_error([] { latent_shape_for_pixels(450, 256); }, "450x256");
  expect_error(
      [] {
        PackingShapes s;
        s.latent = latent_shape_for_resolution("272p");
        s.latent.frames = 0;
        make_packing_plan(s);
      },
      "latent.frames");
  expect_error(
      [] {
        PackingShapes s;
        s.latent = latent_shape_for_resolution("272p");
        s.text_len_uncond = -1;
        make_packing_plan(s);
      },
      "text_len_uncond");
  expect_error(
      [] {
        PackingShapes s;
        s.latent = latent_shape_for_resolution("272p");
        s.ref_images = {{0, 3}};
        make_packing_plan(s);
      },
      "ref_images[0]");

  // Latent of the wrong size / dtype.
  Tensor x = pack_static_tokens(t2v, cond);
  expect_error([&] { pack_latent_tokens(t2v, Tensor::zeros({1, 48, 2, 4, 5}, DType::F32), aud, x); },
               "latent");
  expect_error([&] { pack_latent_tokens(t2v, lat.to(DType::BF16), aud, x); }, "BF16");
  expect_error([&] { pack_latent_tokens(t2v, lat, Tensor::zeros({1, 9, 64}, DType::F32), x); },
               "audio_latent");
  expect_error([&] { pack_latent_tokens(t2v, lat, Tensor::zeros({2, 10, 64}, DType::F32), x); },
               "audio_latent");
  Tensor small_x = Tensor::zeros({t2v.total_tokens - 1, 64}, DType::F32);
  expect_error([&] { pack_latent_tokens(t2v, lat, aud, small_x); }, "x:");

  // Text of the wrong length, missing / unexpected reference image.
  PackingConditioning bad = cond;
  bad.text_uncond = f->tensor("raw_txt_feat");
  expect_error([&] { pack_static_tokens(t2v, bad); }, "text_uncond");
  expect_error([&] { pack_static_tokens(i2v, cond); }, "ref_image_feat");
  expect_error([&] { pack_static_tokens(t2v, golden_conditioning(true)); }, "no reference images");
  PackingConditioning no_special = golden_conditioning(true);
  no_special.ref_special_tokens = Tensor();
  expect_error([&] { pack_static_tokens(i2v, no_special); }, "ref_special_tokens");
  PackingShapes big = golden_shapes(true);
  big.ref_images[0] = {6, 3};
  expect_error([&] { pack_static_tokens(make_packing_plan(big), golden_conditioning(true)); },
               "exceeds the tensor grid");

  // Output / time buffers.
  expect_error([&] { unpack_output(t2v, f->tensor("i2v_out")); }, "DiT output");
  expect_error([&] { unpack_output(t2v, f->tensor("t2v_out").slice_cols(0, 48)); }, "DiT output");
  Tensor temb = Tensor::zeros({t2v.total_tokens, 32}, DType::F32);
  expect_error([&] { fill_time_embedding(t2v, 823.0f, temb); }, "time_emb");
}

}  // namespace
}  // namespace magi2
