#include "media/resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "media/clip.h"

namespace magi2 {
namespace {

// One axis of torch's linear interpolation (align_corners=False, no scale given).
struct AxisTaps {
  std::vector<int64_t> i0, i1;
  std::vector<float> w0, w1;
};

AxisTaps axis_taps(int64_t in, int64_t out) {
  AxisTaps t;
  t.i0.resize(out);
  t.i1.resize(out);
  t.w0.resize(out);
  t.w1.resize(out);
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (int64_t d = 0; d < out; ++d) {
    float s = scale * (static_cast<float>(d) + 0.5f) - 0.5f;
    s = std::max(s, 0.0f);
    const auto i0 = static_cast<int64_t>(std::floor(s));
    const float l1 = std::min(std::max(s - static_cast<float>(i0), 0.0f), 1.0f);
    t.i0[d] = i0;
    t.i1[d] = i0 + (i0 < in - 1 ? 1 : 0);
    t.w0[d] = 1.0f - l1;
    t.w1[d] = l1;
  }
  return t;
}

}  // namespace

Tensor resize_frames_bilinear(const Tensor& frames, int64_t out_width, int64_t out_height,
                              ResizeRounding rounding) {
  check_frames(frames, "output resize");
  MAGI2_CHECK(out_width >= 1 && out_height >= 1, "output resize: bad size ", out_width, "x",
              out_height);
  const int64_t t = frames.size(0), h = frames.size(1), w = frames.size(2);
  if (h == out_height && w == out_width) return frames;
  const AxisTaps ty = axis_taps(h, out_height), tx = axis_taps(w, out_width);
  Tensor out = Tensor::empty({t, out_height, out_width, 3}, DType::U8);
  const uint8_t* src = frames.data_as<uint8_t>();
  uint8_t* dst = out.data_as<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t f = 0; f < t; ++f) {
    const uint8_t* in = src + f * h * w * 3;
    uint8_t* o = dst + f * out_height * out_width * 3;
    for (int64_t y = 0; y < out_height; ++y) {
      const uint8_t* r0 = in + ty.i0[y] * w * 3;
      const uint8_t* r1 = in + ty.i1[y] * w * 3;
      for (int64_t x = 0; x < out_width; ++x) {
        const int64_t c0 = tx.i0[x] * 3, c1 = tx.i1[x] * 3;
        for (int c = 0; c < 3; ++c) {
          // Official input: frames.float() / 255.0 (an f32 division).
          const float a = static_cast<float>(r0[c0 + c]) / 255.0f, b = static_cast<float>(r0[c1 + c]) / 255.0f;
          const float p = static_cast<float>(r1[c0 + c]) / 255.0f, q = static_cast<float>(r1[c1 + c]) / 255.0f;
          // torch's order: each row is x0*w0 + x1*w1; then row0*h0 + row1*h1.
          float top = a * tx.w0[x];
          top += b * tx.w1[x];
          float bot = p * tx.w0[x];
          bot += q * tx.w1[x];
          float v = top * ty.w0[y];
          v += bot * ty.w1[y];
          v = std::min(std::max(v, 0.0f), 1.0f) * 255.0f;
          o[(y * out_width + x) * 3 + c] = static_cast<uint8_t>(
              rounding == ResizeRounding::Truncate ? v : std::nearbyint(v));
        }
      }
    }
  }
  return out;
}

}  // namespace magi2
