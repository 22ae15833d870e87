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
    float s = std::fma(scale, static_cast<float>(d) + 0.5f, -0.5f);  // fused, as torch's build
    s = std::max(s, 0.0f);
    const auto i0 = std::min(static_cast<int64_t>(std::floor(s)), in - 1);
    const float l1 = std::min(std::max(s - static_cast<float>(i0), 0.0f), 1.0f);
    t.i0[d] = i0;
    t.i1[d] = i0 + (i0 < in - 1 ? 1 : 0);
    t.w0[d] = 1.0f - l1;
    t.w1[d] = l1;
  }
  return t;
}

// One frame. Torch's CPU build (GCC, FMA enabled) contracts `a * b - c` and
// `a * w0 + b * w1` into fused multiply-adds; matching it bit for bit needs the
// same fusions, spelled out with std::fma.
[[gnu::always_inline]] inline void resize_frame(const uint8_t* in, int64_t h, int64_t w, uint8_t* o,
                                                int64_t out_h, int64_t out_w, const AxisTaps& ty,
                                                const AxisTaps& tx, ResizeRounding rounding) {
  for (int64_t y = 0; y < out_h; ++y) {
    const uint8_t* r0 = in + ty.i0[y] * w * 3;
    const uint8_t* r1 = in + ty.i1[y] * w * 3;
    for (int64_t x = 0; x < out_w; ++x) {
      const int64_t c0 = tx.i0[x] * 3, c1 = tx.i1[x] * 3;
      for (int c = 0; c < 3; ++c) {
        // Official input: frames.float() / 255.0 (an f32 division).
        const float a = static_cast<float>(r0[c0 + c]) / 255.0f, b = static_cast<float>(r0[c1 + c]) / 255.0f;
        const float p = static_cast<float>(r1[c0 + c]) / 255.0f, q = static_cast<float>(r1[c1 + c]) / 255.0f;
        // Columns first, then rows (torch: the height taps are the outer level).
        const float top = std::fma(a, tx.w0[x], b * tx.w1[x]);
        const float bot = std::fma(p, tx.w0[x], q * tx.w1[x]);
        float v = std::fma(top, ty.w0[y], bot * ty.w1[y]);
        v = std::min(std::max(v, 0.0f), 1.0f) * 255.0f;
        o[(y * out_w + x) * 3 + c] =
            static_cast<uint8_t>(rounding == ResizeRounding::Truncate ? v : std::nearbyint(v));
      }
    }
  }
}

void resize_frame_generic(const uint8_t* in, int64_t h, int64_t w, uint8_t* o, int64_t out_h,
                          int64_t out_w, const AxisTaps& ty, const AxisTaps& tx, ResizeRounding r) {
  resize_frame(in, h, w, o, out_h, out_w, ty, tx, r);
}

#if defined(__x86_64__)
// Same code with hardware FMA (std::fma is a slow library call on baseline x86-64).
[[gnu::target("fma")]] void resize_frame_fma(const uint8_t* in, int64_t h, int64_t w, uint8_t* o,
                                             int64_t out_h, int64_t out_w, const AxisTaps& ty,
                                             const AxisTaps& tx, ResizeRounding r) {
  resize_frame(in, h, w, o, out_h, out_w, ty, tx, r);
}
#endif

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
  auto* kernel = &resize_frame_generic;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("fma")) kernel = &resize_frame_fma;
#endif
#pragma omp parallel for schedule(static)
  for (int64_t f = 0; f < t; ++f)
    kernel(src + f * h * w * 3, h, w, dst + f * out_height * out_width * 3, out_height, out_width, ty,
           tx, rounding);
  return out;
}

}  // namespace magi2
