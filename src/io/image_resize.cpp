// PIL's LANCZOS resample, re-derived from its documented behaviour and the
// structure of libImaging/Resample.c (see image_resize.h). Bit-exactness rests
// on evaluating the filter taps with the same double operations in the same
// order (no FMA contraction: the default x86-64 target has none) and on the
// same fixed-point rounding of taps and sums.
#include "io/image_resize.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace magi2 {
namespace {

constexpr double kLanczosSupport = 3.0;
// 8 bits of pixel, 2 guard bits for the filter's negative lobes and overshoot.
constexpr int kPrecisionBits = 32 - 8 - 2;

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}

double lanczos(double x) {
  if (-3.0 <= x && x < 3.0) return sinc(x) * sinc(x / 3);
  return 0.0;
}

// Taps of one output axis: output i reads inputs [first[i], first[i] + count[i])
// with fixed-point weights taps[i * ksize + j].
struct AxisTaps {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> taps;
};

AxisTaps make_taps(int in_size, int out_size) {
  // The box is the whole axis: [0, in_size) as floats, as PIL passes it.
  const float in0 = 0.f, in1 = static_cast<float>(in_size);
  const double scale = static_cast<double>(in1 - in0) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = kLanczosSupport * filterscale;
  AxisTaps a;
  a.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  a.first.resize(out_size);
  a.count.resize(out_size);
  a.taps.assign(static_cast<size_t>(out_size) * a.ksize, 0);
  std::vector<double> k(a.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = lanczos((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    int32_t* t = &a.taps[static_cast<size_t>(xx) * a.ksize];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? k[x] / ww : k[x];
      const double s = v * (1 << kPrecisionBits);
      t[x] = static_cast<int32_t>(v < 0 ? -0.5 + s : 0.5 + s);
    }
    a.first[xx] = xmin;
    a.count[xx] = xmax;
  }
  return a;
}

inline uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;  // arithmetic shift: floor
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// One pass over `lines` lines of `n_out` pixels; pixel (line, i) reads inputs
// (line, first[i] + j) at element offset line*line_stride + pos*pix_stride.
void resample_axis(const uint8_t* in, uint8_t* out, const AxisTaps& a, int64_t lines, int64_t n_out,
                   int64_t in_line_stride, int64_t in_pix_stride, int64_t out_line_stride,
                   int64_t out_pix_stride) {
  for (int64_t line = 0; line < lines; ++line) {
    for (int64_t i = 0; i < n_out; ++i) {
      const int32_t* t = &a.taps[static_cast<size_t>(i) * a.ksize];
      const uint8_t* src = in + line * in_line_stride + static_cast<int64_t>(a.first[i]) * in_pix_stride;
      for (int c = 0; c < 3; ++c) {
        int32_t acc = 1 << (kPrecisionBits - 1);
        for (int j = 0; j < a.count[i]; ++j) acc += static_cast<int32_t>(src[j * in_pix_stride + c]) * t[j];
        out[line * out_line_stride + i * out_pix_stride + c] = clip8(acc);
      }
    }
  }
}

}  // namespace

Tensor resize_lanczos_pil(const Tensor& rgb, int64_t out_w, int64_t out_h) {
  MAGI2_CHECK(rgb.dtype() == DType::U8 && rgb.dim() == 3 && rgb.shape()[2] == 3 && rgb.is_contiguous(),
              "resize_lanczos_pil: expected a contiguous U8 [H, W, 3] image, got ", shape_str(rgb.shape()));
  MAGI2_CHECK(out_w >= 1 && out_h >= 1 && out_w <= (1 << 24) && out_h <= (1 << 24),
              "resize_lanczos_pil: bad target size ", out_w, "x", out_h);
  const int64_t in_h = rgb.shape()[0], in_w = rgb.shape()[1];
  if (in_w == out_w && in_h == out_h) return rgb.clone();
  Tensor cur = rgb;
  if (out_w != in_w) {
    const AxisTaps a = make_taps(static_cast<int>(in_w), static_cast<int>(out_w));
    Tensor tmp = Tensor::empty({in_h, out_w, 3}, DType::U8);
    resample_axis(cur.data_as<uint8_t>(), tmp.data_as<uint8_t>(), a, in_h, out_w, in_w * 3, 3, out_w * 3, 3);
    cur = tmp;
  }
  if (out_h != in_h) {
    const int64_t w = cur.shape()[1];
    const AxisTaps a = make_taps(static_cast<int>(in_h), static_cast<int>(out_h));
    Tensor tmp = Tensor::empty({out_h, w, 3}, DType::U8);
    // Lines are columns here: pixel stride is one image row.
    resample_axis(cur.data_as<uint8_t>(), tmp.data_as<uint8_t>(), a, w, out_h, 3, w * 3, 3, w * 3);
    cur = tmp;
  }
  return cur;
}

}  // namespace magi2
