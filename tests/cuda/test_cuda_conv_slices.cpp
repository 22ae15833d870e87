// conv3d on cuDNN in slices of output frames (conv_runner.h): the slice plan
// (host only: runs without a GPU) and, on a GPU, a ConvRunner with a small
// per-call bound against one cuDNN call and against our bit-exact kernel.
// The bound is 2^31 elements in the engine; at 1080p the TurboVAE decoder's
// 36 x 544 x 960 x 128 convs exceed it and used to fall back to our kernel.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cuda/conv_runner.h"
#include "cuda_fixture.h"

namespace magi2 {
namespace {

using cuda::ConvTimeSlice;
using cuda::conv_time_slices;

// Every output frame once, in order; each slice reads the input frames its outputs need; both under the bound.
void expect_valid(const std::vector<ConvTimeSlice>& v, int64_t out_frames, int64_t in_frame, int64_t out_frame,
                  int64_t kt, int st, int dt, int64_t max_elems) {
  ASSERT_FALSE(v.empty());
  int64_t next = 0;
  for (const ConvTimeSlice& c : v) {
    EXPECT_EQ(c.out_begin, next);
    EXPECT_GT(c.out_end, c.out_begin);
    EXPECT_EQ(c.in_begin, c.out_begin * st);
    EXPECT_EQ(c.in_frames, (c.out_end - c.out_begin - 1) * st + (kt - 1) * dt + 1);
    EXPECT_LT(c.in_frames * in_frame, max_elems);
    EXPECT_LT((c.out_end - c.out_begin) * out_frame, max_elems);
    next = c.out_end;
  }
  EXPECT_EQ(next, out_frames);
}

TEST(ConvTimeSlices, TheWidest1080pDecoderConvsSplitInTwo) {
  // up_blocks.2 / up_blocks.3.conv_in at 1080p: 36 output frames of 544 x 960, 128 channels in, replicate-padded to 38.
  const int64_t px = 544 * 960, lim = cuda::kMaxCallElements;
  auto v = conv_time_slices(36, px * 128, px * 128, 3, 1, 1, lim);
  expect_valid(v, 36, px * 128, px * 128, 3, 1, 1, lim);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].out_end, 18);
  EXPECT_EQ(v[1].in_begin + v[1].in_frames, 38);  // the last slice ends at the padded input's end
  // The 1x3x3 resample and the 1x1x1 shortcut: no time reach.
  v = conv_time_slices(36, px * 128, px * 128, 1, 1, 1, lim);
  expect_valid(v, 36, px * 128, px * 128, 1, 1, 1, lim);
  EXPECT_EQ(v.size(), 2u);
}

TEST(ConvTimeSlices, OneSliceWhenItFitsNoneWhenAFrameDoesNot) {
  auto v = conv_time_slices(10, 100, 100, 3, 1, 1, 1 << 20);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].in_frames, 12);
  EXPECT_TRUE(conv_time_slices(10, 1000, 10, 3, 1, 1, 2500).empty());  // 3 input frames = 3000 elements
  EXPECT_TRUE(conv_time_slices(10, 10, 1000, 1, 1, 1, 1000).empty());  // one output frame = the bound
  EXPECT_TRUE(conv_time_slices(0, 10, 10, 3, 1, 1, 1000).empty());
}

TEST(ConvTimeSlices, EvenSlicesWithStrideAndDilation) {
  for (int64_t out = 1; out <= 40; ++out)
    for (int st = 1; st <= 3; ++st)
      for (int dt = 1; dt <= 2; ++dt)
        for (int64_t kt : {1, 3, 5}) {
          const int64_t lim = 7 * 64 + 1;  // input slices of at most 7 frames of 64 elements
          const int64_t reach = (kt - 1) * dt + 1;
          auto v = conv_time_slices(out, 64, 32, kt, st, dt, lim);
          if (reach > 7) {
            EXPECT_TRUE(v.empty());
            continue;
          }
          expect_valid(v, out, 64, 32, kt, st, dt, lim);
          int64_t lo = out, hi = 0;
          for (const auto& c : v) {
            lo = std::min(lo, c.out_end - c.out_begin);
            hi = std::max(hi, c.out_end - c.out_begin);
          }
          EXPECT_LE(hi - lo, 1) << out << " " << st << " " << dt << " " << kt;
        }
}

class CudaConvSlices : public test::CudaParityTest {
 protected:
  // y = conv3d(x) by `runner` on the backend's stream, back on the host.
  Tensor run(cuda::ConvRunner& runner, const Conv3dParams& host, bool* took) {
    Conv3dParams p = host;
    p.x = up(host.x);
    p.w = up(host.w);
    if (host.bias.defined()) p.bias = up(host.bias);
    p.y = poisoned(host.y.shape(), host.y.dtype());
    *took = runner.conv3d(p, static_cast<cudaStream_t>(cuda_stream_of(*gpu_)));
    return down(p.y);
  }
  std::unique_ptr<cuda::ConvRunner> runner(int64_t max_call_elements) {
    return std::make_unique<cuda::ConvRunner>(
        [this](size_t bytes) {
          Tensor t = gpu_->alloc({static_cast<int64_t>((bytes + 1) / 2)}, DType::BF16);
          return std::shared_ptr<void>(t.data(), [t](void*) {});
        },
        max_call_elements);
  }
  // rel-RMS of a - b over b, both bf16 [.., C].
  static double rel_rms(const Tensor& a, const Tensor& b) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double x = bf16_bits_to_f32(a.data_as<uint16_t>()[i]), y = bf16_bits_to_f32(b.data_as<uint16_t>()[i]);
      num += (x - y) * (x - y);
      den += y * y;
    }
    return std::sqrt(num / den);
  }
};

TEST_F(CudaConvSlices, SlicedCallsMatchOneCallAndTheCpu) {
  struct Case {
    int64_t T;
    int kt, k, front, back;
    TimePad tp;
  };
  // k3 with replicated edge frames (the decoder's 3x3x3), 1x3x3 and 3x1x1.
  for (const Case c : {Case{7, 3, 3, 1, 1, TimePad::Replicate}, Case{9, 1, 3, 0, 0, TimePad::Zeros},
                       Case{6, 3, 1, 1, 1, TimePad::Replicate}, Case{8, 3, 3, 0, 0, TimePad::Zeros}}) {
    const int64_t H = 12, W = 20, ci = 32, co = 48, ph = c.k / 2;
    const int64_t to = c.T + c.front + c.back - (c.kt - 1);
    Conv3dParams p{.x = random({c.T, H, W, ci}, DType::BF16),
                   .w = random({co, c.kt, c.k, c.k, ci}, DType::BF16, 0.05f),
                   .bias = random({co}, DType::BF16, 0.5f),
                   .y = Tensor::empty({to, H, W, co}, DType::BF16),
                   .pad_front = {c.front, static_cast<int>(ph), static_cast<int>(ph)},
                   .pad_back = {c.back, static_cast<int>(ph), static_cast<int>(ph)},
                   .time_pad = c.tp};
    cpu_->conv3d(p);
    const Tensor ref = p.y;
    p.y = Tensor::empty(ref.shape(), DType::BF16);
    bool took = false;
    auto whole = runner(cuda::kMaxCallElements);
    const Tensor one = run(*whole, p, &took);
    ASSERT_TRUE(took);
    EXPECT_EQ(whole->forward_calls(), 1);
    // At most 3 input frames per call (x counted at max(ci, co) channels).
    const int64_t lim = 3 * H * W * co + 1;
    auto sliced = runner(lim);
    const Tensor parts = run(*sliced, p, &took);
    ASSERT_TRUE(took);
    EXPECT_EQ(sliced->forward_calls(),
              static_cast<int64_t>(cuda::conv_time_slices(to, H * W * co, H * W * co, c.kt, 1, 1, lim).size()));
    EXPECT_GE(sliced->forward_calls(), 2);
    EXPECT_LT(rel_rms(parts, ref), 3e-3) << "T " << c.T << " k" << c.kt << "x" << c.k;
    EXPECT_LT(rel_rms(one, ref), 3e-3);
  }
}

TEST_F(CudaConvSlices, ZeroTimePaddingTooLargeFallsBack) {
  // Zero time padding would have to be applied per slice: such a conv goes to our kernel.
  Conv3dParams p{.x = random({8, 4, 4, 16}, DType::BF16),
                 .w = random({16, 3, 3, 3, 16}, DType::BF16, 0.05f),
                 .y = Tensor::empty({8, 4, 4, 16}, DType::BF16),
                 .pad_front = {1, 1, 1},
                 .pad_back = {1, 1, 1},
                 .time_pad = TimePad::Zeros};
  auto small = runner(3 * 4 * 4 * 16 + 1);
  bool took = true;
  (void)run(*small, p, &took);
  EXPECT_FALSE(took);
  EXPECT_EQ(small->forward_calls(), 0);
}

}  // namespace
}  // namespace magi2
