// The W8A8 routed experts, CPU reference (docs/fp8.md, MoeExpertsParams::
// fp8_compute): FP8 weights (e4m3, 128 x 128 block scales) times FP8
// activations. The routed row is quantised before W13 with one scale per
// 1 x 128 group (ops/numerics.h fp8_act_scale / fp8_act_quant); G and U are
// the fp32 sums over their K-blocks of (the fp32 sum of the block's e4m3 x
// e4m3 products, ascending k) * (a_scale * w_scale); Z = SwiGLU7(G, U) in fp32
// is quantised with W_down's block scales folded in (fp8_z_factor: no group
// amax, since |Z| < 56), one e4m3 copy of Z per output column block; Y is the
// fp32 sum over all of d_expert of those products times fp8_z_unscale. Then
// c = bf16(Y * w) and the fp32 combine in ascending expert id, one bf16
// rounding, as the W8A16 reference (moe.cpp). The CUDA fused kernel
// (moe_expert_fused_fp8.cu) has these rounding points; its tensor cores sum
// the products in their own order.
#include <algorithm>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "cpu/fp8_act.h"
#include "cpu/moe_routes.h"
#include "ops/numerics.h"

namespace magi2::cpu {

namespace {

static_assert(kFp8ActGroup == kFp8Block, "activation groups and weight blocks share their K boundaries");

// One FP8 bank [F, K, N] with scales [F, ceil(K / 128), ceil(N / 128)].
struct Fp8Matrix {
  const uint8_t* q;
  const float* scale;
  int64_t k, n, kb, nb;
  explicit Fp8Matrix(const Tensor& t, const Tensor& s)
      : q(t.data_as<uint8_t>()), scale(s.data_as<float>()), k(t.size(1)), n(t.size(2)), kb(s.size(1)),
        nb(s.size(2)) {}

  // out[c] = sum over K-blocks b of (sum_{d in b} xq[d] * W_f[d, c]) * (xs[b] * ws_f[b, c / 128]);
  // part: scratch of n floats.
  void gemv(int64_t f, const float* xq, const float* xs, float* part, float* out) const {
    const float* tab = e4m3_values().v;
    std::fill(out, out + n, 0.0f);
    for (int64_t b = 0; b < kb; ++b) {
      std::fill(part, part + n, 0.0f);
      const int64_t d1 = std::min<int64_t>(k, (b + 1) * kFp8Block);
      for (int64_t d = b * kFp8Block; d < d1; ++d) {
        const float xd = xq[d];
        const uint8_t* w = q + (f * k + d) * n;
        for (int64_t c = 0; c < n; ++c) part[c] += xd * tab[w[c]];
      }
      const float* ws = scale + (f * kb + b) * nb;
      for (int64_t c = 0; c < n; ++c) out[c] += part[c] * fp8_block_scale(xs[b], ws[c / kFp8Block]);
    }
  }

  // W_down with Z's factors folded in (ops/numerics.h fp8_z_factor): for each
  // column block j, zq = e4m3(z * factor(ws_f[b, j], smax_j)) over all K, then
  // out[c] = (sum_d zq[d] * W_f[d, c]) * fp8_z_unscale(smax_j); zq: scratch of k floats.
  void gemv_z(int64_t f, const float* z, float* zq, float* out) const {
    const float* tab = e4m3_values().v;
    const float* sf = scale + f * kb * nb;
    for (int64_t j = 0; j < nb; ++j) {
      float smax = 0.0f;
      for (int64_t b = 0; b < kb; ++b) smax = fp8_amax_step(smax, sf[b * nb + j]);
      for (int64_t d = 0; d < k; ++d) zq[d] = tab[f32_to_e4m3_bits(z[d] * fp8_z_factor(sf[(d / kFp8Block) * nb + j], smax))];
      const int64_t c0 = j * kFp8Block, c1 = std::min<int64_t>(n, c0 + kFp8Block);
      std::fill(out + c0, out + c1, 0.0f);
      for (int64_t d = 0; d < k; ++d) {
        const float zd = zq[d];
        const uint8_t* w = q + (f * k + d) * n;
        for (int64_t c = c0; c < c1; ++c) out[c] += zd * tab[w[c]];
      }
      const float un = fp8_z_unscale(smax);
      for (int64_t c = c0; c < c1; ++c) out[c] *= un;
    }
  }
};

// One thread's expert state for combine_routed_experts: the routed row is
// quantised once (row()), then per route G, U (W8A8 GEMVs), Z = SwiGLU7 in
// fp32, Y = W_down's GEMV with Z's folded factors.
struct W8a8Expert {
  const Fp8Matrix &wg, &wu, &wd;
  int64_t dh, de;
  std::vector<float> xq, xs, g, u, z, zq, part;
  W8a8Expert(const Fp8Matrix& g_, const Fp8Matrix& u_, const Fp8Matrix& d_, int64_t dh_, int64_t de_)
      : wg(g_), wu(u_), wd(d_), dh(dh_), de(de_), xq(dh_), xs((dh_ + kFp8ActGroup - 1) / kFp8ActGroup), g(de_),
        u(de_), z(de_), zq(de_), part(std::max(dh_, de_)) {}
  void row(const float* x) { quantize_groups(x, dh, xq.data(), xs.data()); }
  void route(int64_t f, float* y) {
    wg.gemv(f, xq.data(), xs.data(), part.data(), g.data());
    wu.gemv(f, xq.data(), xs.data(), part.data(), u.data());
    for (int64_t c = 0; c < de; ++c) z[c] = swiglu7_exact_f32(g[c], u[c]);
    wd.gemv_z(f, z.data(), zq.data(), y);
  }
};

}  // namespace

void moe_experts_w8a8(const MoeExpertsParams& p) {
  const int64_t dh = p.r.size(1) / p.num_heads, de = p.w_gate.size(2);
  const Fp8Matrix wg(p.w_gate, p.w_gate_scale), wu(p.w_up, p.w_up_scale), wd(p.w_down, p.w_down_scale);
  combine_routed_experts(p, [&] { return W8a8Expert(wg, wu, wd, dh, de); });
}

}  // namespace magi2::cpu
