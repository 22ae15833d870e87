// The refiner's inputs split by modality (split_refiner_inputs +
// Refiner::load(plan, RefinerInputs), the refine loop's path) against the
// packed [N, c_pad] input (pack_refiner_tokens + Refiner::forward): the same
// rows, and byte-identical forwards on the CPU backend, with audio tokens, a
// text narrower than the text in-channels, and the two CFG layouts sharing one
// workspace in turn.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "core/seeded_random.h"
#include "models/magi2_refiner/refiner.h"
#include "models/magi2_refiner/tokens.h"
#include "ops/ops.h"
#include "pipeline/refine.h"

namespace magi2 {
namespace {

Tensor seeded(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::empty(s, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data_as<float>()[i] = static_cast<float>(normal_sample(seed, static_cast<uint64_t>(i), 0, 1));
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// A seeded tiny refiner: GQA, mm layers at both ends, partial edge blocks.
struct Tiny {
  RefinerArch arch;
  RefinerWindow window{.block_t = 2, .block_hw = 2, .radius_t = 1, .radius_h = 1, .radius_w = 0};
  RefinerWeights w;
  Tiny() {
    arch.num_layers = 2;
    arch.hidden_size = 128;
    arch.head_dim = 32;
    arch.num_query_groups = 2;
    arch.text_in_channels = 80;  // c_pad 80: the video (48) and audio (64) rows go through the staging copy
    arch.mm_layers = {0, 1};
    arch.local_attn_layers = {0, 1};
    uint64_t key = 100;
    w = RefinerWeights::generate(arch, [&](const std::string& name, const Shape& shape, DType dt) {
      Tensor f = seeded(shape, ++key);
      const float sd = shape.size() == 2 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape[1]))) : 0.1f;
      for (int64_t i = 0; i < f.numel(); ++i)
        f.data_as<float>()[i] = name.ends_with("rope.bands")
                                    ? static_cast<float>(std::pow(10000.0, -static_cast<double>(i) / f.numel()))
                                    : f.data_as<float>()[i] * sd;
      return f.to(dt);
    });
  }
};

TEST(RefinerInputs, SplitRowsAreThePackedRowsOfEachModality) {
  const Tiny t;
  const RefinerLayout lay{.frames = 3, .height = 5, .width = 3, .audio_len = 4, .text_len = 6};
  const RefinerPlan p = make_refiner_plan(lay, t.arch, t.window);
  const Tensor lat = seeded({1, 48, 3, 5, 3}, 1), aud = seeded({4, 64}, 2), txt = seeded({6, 70}, 3);
  const Tensor x = pack_refiner_tokens(p, lat, aud, txt, 48, 64);
  const RefinerInputs in = split_refiner_inputs(p, lat, aud, txt, 48, 64, 80);
  ASSERT_EQ(in.video.shape(), (Shape{45, 48}));
  ASSERT_EQ(in.audio.shape(), (Shape{4, 64}));
  ASSERT_EQ(in.text.shape(), (Shape{6, 80}));
  const Tensor* part[3] = {&in.video, &in.audio, &in.text};
  int64_t next[3] = {0, 0, 0};
  for (int64_t i = 0; i < lay.tokens(); ++i) {
    const int m = p.modality.data_as<int32_t>()[i];
    const Tensor& t_m = *part[m];
    const int64_t r = next[m]++, c = t_m.size(1);
    EXPECT_EQ(std::memcmp(t_m.data_as<float>() + r * c, x.data_as<float>() + i * p.c_pad, c * sizeof(float)), 0)
        << "packed row " << i;
  }
  // The text's columns past its 70 features are zeros, as in the packed rows.
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 70; c < 80; ++c) EXPECT_EQ(in.text.data_as<float>()[r * 80 + c], 0.0f);
}

TEST(RefinerInputs, SplitRejectsWhatPackRejects) {
  const Tiny t;
  const RefinerLayout lay{.frames = 2, .height = 2, .width = 2, .audio_len = 0, .text_len = 3};
  const RefinerPlan p = make_refiner_plan(lay, t.arch, t.window);
  EXPECT_THROW(split_refiner_inputs(p, seeded({1, 48, 2, 2, 3}, 1), Tensor(), seeded({3, 80}, 2), 48, 64, 80), Error);
  EXPECT_THROW(split_refiner_inputs(p, seeded({1, 48, 2, 2, 2}, 1), Tensor(), seeded({4, 80}, 2), 48, 64, 80), Error);
  EXPECT_THROW(split_refiner_inputs(p, seeded({1, 48, 2, 2, 2}, 1), Tensor(), seeded({3, 81}, 2), 48, 64, 80), Error);
}

// The CFG branches alternate on one workspace (the uncond layout has more
// text tokens): every forward of the split path gives the packed path's bytes.
TEST(RefinerInputs, SplitLoadGivesThePackedForwardBytes) {
  const Tiny t;
  auto be = make_cpu_backend();
  Refiner split(t.arch, t.w, *be), packed(t.arch, t.w, *be);
  const RefinerLayout lc{.frames = 3, .height = 5, .width = 3, .audio_len = 4, .text_len = 6};
  RefinerLayout lu = lc;
  lu.text_len = 9;
  const RefinerPlan pc = make_refiner_plan(lc, t.arch, t.window), pu = make_refiner_plan(lu, t.arch, t.window);
  const Tensor aud = seeded({4, 64}, 2), tc = seeded({6, 80}, 3), tu = seeded({9, 70}, 4);
  for (int step = 0; step < 2; ++step) {
    const Tensor lat = seeded({1, 48, 3, 5, 3}, 10 + step);
    for (const auto& [plan, text] : {std::pair{&pc, &tc}, std::pair{&pu, &tu}}) {
      const Tensor want = packed.forward(*plan, pack_refiner_tokens(*plan, lat, aud, *text, 48, 64)).clone();
      split.load(*plan, split_refiner_inputs(*plan, lat, aud, *text, 48, 64, 80));
      split.run();
      EXPECT_TRUE(same_bytes(split.output(), want)) << "step " << step << " text " << text->size(0);
    }
  }
}

// The refine loop's branch forward is the packed forward, unpacked.
TEST(RefinerInputs, BranchForwardIsThePackedForwardUnpacked) {
  const Tiny t;
  auto be = make_cpu_backend();
  Refiner a(t.arch, t.w, *be), b(t.arch, t.w, *be);
  const RefinerLayout lay{.frames = 3, .height = 4, .width = 5, .audio_len = 0, .text_len = 7};
  const RefinerPlan p = make_refiner_plan(lay, t.arch, t.window);
  const Tensor lat = seeded({1, 48, 3, 4, 5}, 5), txt = seeded({1, 7, 80}, 6);
  const Tensor want = unpack_refiner_video(p, b.forward(p, pack_refiner_tokens(p, lat, Tensor(), txt, 48, 64)), 48);
  EXPECT_TRUE(same_bytes(refiner_branch_forward(a, p, lat, txt), want));
}

}  // namespace
}  // namespace magi2
