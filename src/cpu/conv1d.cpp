// 1-D convolutions and SnakeBeta on channels-last audio activations [L, C]
// (the Stable Audio Open VAE, spec magi2-pipeline.md §6.2).
//
// Both convolutions run the same register-tiled kernel: an output tile of kTR
// rows x kTO channels accumulates, tap by tap and input channel by input
// channel, x[src_row, i] * w[k, i, o:o+kTO]. Every output element is summed by
// one thread in the order (tap ascending, input channel ascending), so results
// are identical for any thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "ops/codec_checks.h"
#include "ops/codec_numerics.h"

namespace magi2::cpu {

namespace {

constexpr int kTO = 8;  // output channels per tile (one AVX / two SSE vectors)
constexpr int kTR = 8;  // output rows per tile (measured best on AVX2 with kTO = 8)
// Below this many multiply-adds (or elements) a loop runs on one thread: a
// parallel region costs more than it saves. Results do not depend on it.
constexpr int64_t kParallelMin = 1 << 16;

// Repacks w [K, Cin, Cout] into ceil(Cout/kTO) blocks of [K][Cin][kTO],
// zero-padding the last block, so a tile reads its weights contiguously.
std::vector<float> pack_weights(const float* w, int64_t taps, int64_t cin, int64_t cout) {
  const int64_t blocks = (cout + kTO - 1) / kTO;
  std::vector<float> out(static_cast<size_t>(blocks * taps * cin * kTO), 0.f);
#pragma omp parallel for schedule(static) if (blocks * taps * cin * kTO > kParallelMin)
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t k = 0; k < taps; ++k)
      for (int64_t i = 0; i < cin; ++i) {
        float* d = out.data() + ((b * taps + k) * cin + i) * kTO;
        const float* s = w + (k * cin + i) * cout + b * kTO;
        const int64_t n = std::min<int64_t>(kTO, cout - b * kTO);
        for (int64_t o = 0; o < n; ++o) d[o] = s[o];
      }
  return out;
}

constexpr int kMaxTaps = static_cast<int>(kConv1dMaxTaps);

// One output tile: out[r][o] = sum over taps q (in order) and input channels i
// (in order) of xr[q][r][i] * w[q][i][o], where w[q] = wp + tap[q] * cin * kTO.
// Compiled for AVX2 and for the baseline; the code has no fused multiply-add
// (no -ffp-contract, no FMA target), so both give the same bits.
__attribute__((target_clones("avx2", "default"))) void tile_kernel(const float* const (*xr)[kTR],
                                                                  const float* wp, const int64_t* tap, int ntaps,
                                                                  int64_t cin, float out[kTR][kTO]) {
  float acc[kTR][kTO] = {};
  for (int q = 0; q < ntaps; ++q) {
    const float* w = wp + tap[q] * cin * kTO;
    for (int64_t i = 0; i < cin; ++i) {
      const float* wi = w + i * kTO;
      for (int r = 0; r < kTR; ++r) {
        const float a = xr[q][r][i];
        for (int o = 0; o < kTO; ++o) acc[r][o] += a * wi[o];
      }
    }
  }
  for (int r = 0; r < kTR; ++r)
    for (int o = 0; o < kTO; ++o) out[r][o] = acc[r][o];
}

// Writes rows[r] (r < nr) of y from the tile: (acc + bias) + residual.
void store_tile(const float acc[kTR][kTO], const int64_t rows[kTR], int nr, int64_t o0, int64_t cout,
                const float* bias, const float* residual, float* y) {
  const int64_t n = std::min<int64_t>(kTO, cout - o0);
  for (int r = 0; r < nr; ++r) {
    float* yr = y + rows[r] * cout + o0;
    const float* rr = residual ? residual + rows[r] * cout + o0 : nullptr;
    for (int64_t o = 0; o < n; ++o) {
      float v = acc[r][o];
      if (bias) v += bias[o0 + o];
      if (rr) v += rr[o];
      yr[o] = v;
    }
  }
}

}  // namespace

void conv1d(const Conv1dParams& p) {
  const Conv1dDims d = check_conv1d(p, Device::CPU);
  const int64_t lin = d.lin, cin = d.cin, taps = d.taps, cout = d.cout, lout = d.lout;
  const float* bias = p.bias.defined() ? p.bias.data_as<float>() : nullptr;
  const float* residual = p.residual.defined() ? p.residual.data_as<float>() : nullptr;
  const std::vector<float> wp = pack_weights(p.w.data_as<float>(), taps, cin, cout);
  const std::vector<float> zeros(static_cast<size_t>(cin), 0.f);
  const float* x = p.x.data_as<float>();
  float* y = p.y.data_as<float>();
  const int64_t blocks = (cout + kTO - 1) / kTO, tiles = (lout + kTR - 1) / kTR;
#pragma omp parallel for schedule(static) if (lout * cout * taps * cin > kParallelMin)
  for (int64_t job = 0; job < blocks * tiles; ++job) {
    const int64_t b = job / tiles, t0 = (job % tiles) * kTR;
    const int nr = static_cast<int>(std::min<int64_t>(kTR, lout - t0));
    int64_t rows[kTR];
    for (int r = 0; r < kTR; ++r) rows[r] = t0 + std::min(r, nr - 1);
    const float* xr[kMaxTaps][kTR];
    int64_t tap[kMaxTaps];
    for (int64_t k = 0; k < taps; ++k) {
      tap[k] = k;
      for (int r = 0; r < kTR; ++r) {
        const int64_t s = rows[r] * p.stride + k * p.dilation - p.padding;
        xr[k][r] = (s >= 0 && s < lin) ? x + s * cin : zeros.data();
      }
    }
    float acc[kTR][kTO];
    tile_kernel(xr, wp.data() + b * taps * cin * kTO, tap, static_cast<int>(taps), cin, acc);
    store_tile(acc, rows, nr, b * kTO, cout, bias, residual, y);
  }
}

void conv_transpose1d(const ConvTranspose1dParams& p) {
  const Conv1dDims d = check_conv_transpose1d(p, Device::CPU);
  const int64_t lin = d.lin, cin = d.cin, taps = d.taps, cout = d.cout, lout = d.lout;
  const int64_t s = p.stride, pad = p.padding;
  const float* bias = p.bias.defined() ? p.bias.data_as<float>() : nullptr;
  const std::vector<float> wp = pack_weights(p.w.data_as<float>(), taps, cin, cout);
  const std::vector<float> zeros(static_cast<size_t>(cin), 0.f);
  const float* x = p.x.data_as<float>();
  float* y = p.y.data_as<float>();
  // Output rows fall into `s` phases (t + pad) mod s; rows of one phase use the
  // same taps k = phase, phase + s, ... and consecutive input rows, so a tile
  // takes kTR rows of one phase.
  std::vector<int64_t> first(s), count(s), tile_begin(s + 1, 0);
  for (int64_t ph = 0; ph < s; ++ph) {
    first[ph] = ((ph - pad) % s + s) % s;
    count[ph] = first[ph] < lout ? (lout - 1 - first[ph]) / s + 1 : 0;
    tile_begin[ph + 1] = tile_begin[ph] + (count[ph] + kTR - 1) / kTR;
  }
  const int64_t blocks = (cout + kTO - 1) / kTO, tiles = tile_begin[s];
#pragma omp parallel for schedule(static) if (lout * cout * taps * cin / s > kParallelMin)
  for (int64_t job = 0; job < blocks * tiles; ++job) {
    const int64_t b = job / tiles, tile = job % tiles;
    const int64_t ph = std::upper_bound(tile_begin.begin(), tile_begin.end(), tile) - tile_begin.begin() - 1;
    const int64_t m0 = (tile - tile_begin[ph]) * kTR;
    const int nr = static_cast<int>(std::min<int64_t>(kTR, count[ph] - m0));
    int64_t rows[kTR];
    for (int r = 0; r < kTR; ++r) rows[r] = first[ph] + (m0 + std::min(r, nr - 1)) * s;
    const float* xr[kMaxTaps][kTR];
    int64_t tap[kMaxTaps];
    int n = 0;
    for (int64_t k = (rows[0] + pad) % s; k < taps; k += s, ++n) {
      tap[n] = k;
      for (int r = 0; r < kTR; ++r) {
        const int64_t j = (rows[r] + pad - k) / s;  // exact: same phase as k
        xr[n][r] = (rows[r] + pad - k >= 0 && j < lin) ? x + j * cin : zeros.data();
      }
    }
    float acc[kTR][kTO];
    tile_kernel(xr, wp.data() + b * taps * cin * kTO, tap, n, cin, acc);
    store_tile(acc, rows, nr, b * kTO, cout, bias, nullptr, y);
  }
}

void snake_beta(const SnakeBetaParams& p) {
  const auto dims = check_snake_beta(p, Device::CPU);
  const int64_t rows = dims[0], cols = dims[1];
  // Per-channel factors (codec_numerics.h), then the element formula.
  std::vector<float> a(cols), inv_b(cols);
  for (int64_t c = 0; c < cols; ++c) {
    a[c] = snake_alpha(p.alpha.data_as<float>()[c], p.logscale);
    inv_b[c] = snake_inv_beta(p.beta.data_as<float>()[c], p.logscale);
  }
  const float* x = p.x.data_as<float>();
  float* y = p.y.data_as<float>();
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = snake_beta_element(x[r * cols + c], a[c], inv_b[c]);
}

}  // namespace magi2::cpu
