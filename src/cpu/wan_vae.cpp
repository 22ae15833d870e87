// CPU ops of the Wan2.2 VAE encoder (spec magi2-pipeline.md §6.3): channel
// L2 ("RMS_norm") norm with optional SiLU, the AvgDown3D shortcut, fp32
// single-head attention and the per-channel latent affine. All fp32; every
// output element is computed by one thread in a fixed order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "ops/codec_checks.h"
#include "ops/codec_numerics.h"

namespace magi2::cpu {
void channel_l2_norm(const ChannelL2NormParams& p) {
  const auto dims = check_channel_l2_norm(p, Device::CPU);
  const int64_t rows = dims[0], cols = dims[1];
  const float* g = p.gamma.data_as<float>();
  const float root_c = static_cast<float>(std::sqrt(static_cast<double>(cols)));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = reinterpret_cast<const float*>(row_ptr(p.x, r));
    float* y = reinterpret_cast<float*>(row_ptr(p.y, r));
    double ss = 0.0;
    for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(x[c]) * x[c];
    const float denom = channel_l2_denom(ss);
    for (int64_t c = 0; c < cols; ++c) y[c] = channel_l2_element(x[c], denom, root_c, g[c], p.silu);
  }
}

void avg_down3d(const AvgDown3dParams& p) {
  const AvgDown3dDims d = check_avg_down3d(p, Device::CPU);
  const int64_t ft = p.factor_t, fs = p.factor_s;
  const int64_t H = d.H, W = d.W, Ci = d.ci, pad_t = d.pad_t, To = d.to, Ho = d.ho, Wo = d.wo, Co = d.co;
  const int64_t G = d.group;
  const float* x = p.x.data_as<float>();
  float* y = p.y.data_as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t pos = 0; pos < To * Ho * Wo; ++pos) {
    const int64_t to = pos / (Ho * Wo), ho = pos / Wo % Ho, wo = pos % Wo;
    for (int64_t o = 0; o < Co; ++o)
      y[pos * Co + o] = avg_down3d_element(x, H, W, Ci, pad_t, G, ft, fs, to, ho, wo, o);
  }
}

void spatial_attention(const SpatialAttentionParams& p) {
  const auto dims = check_spatial_attention(p, Device::CPU);
  const int64_t rows = dims[0], cols = dims[1];
  const int64_t n = p.block_rows;
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
  const auto dims = check_channel_affine(p, Device::CPU);
  const int64_t rows = dims[0], cols = dims[1];
  const float* a = p.shift.data_as<float>();
  const float* m = p.mul.data_as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = reinterpret_cast<const float*>(row_ptr(p.x, r));
    float* y = reinterpret_cast<float*>(row_ptr(p.y, r));
    for (int64_t c = 0; c < cols; ++c) y[c] = channel_affine_element(x[c], a[c], m[c]);
  }
}

}  // namespace magi2::cpu
