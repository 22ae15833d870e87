// CPU ops of the Wan2.2 VAE encoder (spec magi2-pipeline.md §6.3): channel
// L2 ("RMS_norm") norm with optional SiLU, the AvgDown3D shortcut, fp32
// single-head attention and the per-channel latent affine. All fp32; every
// output element is computed by one thread in a fixed order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"

namespace magi2::cpu {
namespace {

void check_f32_vec(const Tensor& t, int64_t n, const char* what) {
  MAGI2_CHECK(t.defined() && t.device() == Device::CPU && t.dtype() == DType::F32 && t.numel() == n &&
                  t.is_contiguous(),
              what, ": expected ", n, " contiguous f32 values, got ", t.defined() ? shape_str(t.shape()) : "none");
}

void check_f32_2d(const Tensor& t, int64_t rows, int64_t cols, const char* what) {
  check_2d(t, rows, cols, what);
  MAGI2_CHECK(t.dtype() == DType::F32, what, ": expected f32");
}

void check_f32_video(const Tensor& t, const char* what) {
  MAGI2_CHECK(t.defined() && t.device() == Device::CPU && t.dtype() == DType::F32 && t.dim() == 4 &&
                  t.is_contiguous(),
              what, ": expected a contiguous f32 [T, H, W, C] tensor");
}

}  // namespace

void channel_l2_norm(const ChannelL2NormParams& p) {
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  check_f32_2d(p.x, rows, cols, "channel_l2_norm.x");
  check_f32_2d(p.y, rows, cols, "channel_l2_norm.y");
  check_f32_vec(p.gamma, cols, "channel_l2_norm.gamma");
  const float* g = p.gamma.data_as<float>();
  const float root_c = static_cast<float>(std::sqrt(static_cast<double>(cols)));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = reinterpret_cast<const float*>(row_ptr(p.x, r));
    float* y = reinterpret_cast<float*>(row_ptr(p.y, r));
    double ss = 0.0;
    for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(x[c]) * x[c];
    const float denom = std::max(static_cast<float>(std::sqrt(ss)), 1e-12f);
    for (int64_t c = 0; c < cols; ++c) {
      float v = ((x[c] / denom) * root_c) * g[c];
      if (p.silu) v = v / (1.0f + std::exp(-v));
      y[c] = v;
    }
  }
}

void avg_down3d(const AvgDown3dParams& p) {
  check_f32_video(p.x, "avg_down3d.x");
  check_f32_video(p.y, "avg_down3d.y");
  const int64_t ft = p.factor_t, fs = p.factor_s;
  MAGI2_CHECK(ft >= 1 && fs >= 1, "avg_down3d: factors must be >= 1");
  const int64_t T = p.x.size(0), H = p.x.size(1), W = p.x.size(2), Ci = p.x.size(3);
  const int64_t pad_t = (ft - T % ft) % ft;
  const int64_t To = (T + pad_t) / ft, Ho = H / fs, Wo = W / fs, Co = p.y.size(3);
  MAGI2_CHECK(H % fs == 0 && W % fs == 0, "avg_down3d: H, W (", H, ", ", W, ") not divisible by ", fs);
  MAGI2_CHECK(p.y.size(0) == To && p.y.size(1) == Ho && p.y.size(2) == Wo, "avg_down3d.y: expected [", To, ", ",
              Ho, ", ", Wo, ", C], got ", shape_str(p.y.shape()));
  const int64_t folded = Ci * ft * fs * fs;
  MAGI2_CHECK(Co >= 1 && folded % Co == 0, "avg_down3d: ", folded, " folded channels do not group into ", Co);
  const int64_t G = folded / Co;
  const float* x = p.x.data_as<float>();
  float* y = p.y.data_as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t pos = 0; pos < To * Ho * Wo; ++pos) {
    const int64_t to = pos / (Ho * Wo), ho = pos / Wo % Ho, wo = pos % Wo;
    for (int64_t o = 0; o < Co; ++o) {
      float sum = 0.f;
      for (int64_t g = 0; g < G; ++g) {
        int64_t f = o * G + g;
        const int64_t iw = f % fs;
        f /= fs;
        const int64_t ih = f % fs;
        f /= fs;
        const int64_t it = f % ft;
        const int64_t c = f / ft;
        const int64_t t = to * ft + it - pad_t;  // padded frames are zeros
        if (t < 0) continue;
        sum += x[((t * H + ho * fs + ih) * W + wo * fs + iw) * Ci + c];
      }
      y[pos * Co + o] = sum / static_cast<float>(G);
    }
  }
}

void spatial_attention(const SpatialAttentionParams& p) {
  const int64_t rows = p.q.size(0), cols = p.q.size(1);
  check_f32_2d(p.q, rows, cols, "spatial_attention.q");
  check_f32_2d(p.k, rows, cols, "spatial_attention.k");
  check_f32_2d(p.v, rows, cols, "spatial_attention.v");
  check_f32_2d(p.o, rows, cols, "spatial_attention.o");
  const int64_t n = p.block_rows;
  MAGI2_CHECK(n >= 1 && rows % n == 0, "spatial_attention: ", rows, " rows are not blocks of ", n);
#pragma omp parallel
  {
    std::vector<float> s(n), acc(cols);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t b0 = i / n * n;
      const float* q = reinterpret_cast<const float*>(row_ptr(p.q, i));
      float mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = dot_f32(q, reinterpret_cast<const float*>(row_ptr(p.k, b0 + j)), cols) * p.scale;
        mx = std::max(mx, s[j]);
      }
      float den = 0.f;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - mx);
        den += s[j];
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t j = 0; j < n; ++j) {
        const float* v = reinterpret_cast<const float*>(row_ptr(p.v, b0 + j));
        for (int64_t c = 0; c < cols; ++c) acc[c] += s[j] * v[c];
      }
      float* o = reinterpret_cast<float*>(row_ptr(p.o, i));
      for (int64_t c = 0; c < cols; ++c) o[c] = acc[c] / den;
    }
  }
}

void channel_affine(const ChannelAffineParams& p) {
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  check_f32_2d(p.x, rows, cols, "channel_affine.x");
  check_f32_2d(p.y, rows, cols, "channel_affine.y");
  check_f32_vec(p.shift, cols, "channel_affine.shift");
  check_f32_vec(p.mul, cols, "channel_affine.mul");
  const float* a = p.shift.data_as<float>();
  const float* m = p.mul.data_as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = reinterpret_cast<const float*>(row_ptr(p.x, r));
    float* y = reinterpret_cast<float*>(row_ptr(p.y, r));
    for (int64_t c = 0; c < cols; ++c) y[c] = (x[c] - a[c]) * m[c];
  }
}

}  // namespace magi2::cpu
