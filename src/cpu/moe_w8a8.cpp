// The W8A8 routed experts, CPU reference (docs/fp8.md, MoeExpertsParams::
// fp8_compute): FP8 weights (e4m3, 128 x 128 block scales) times FP8
// activations (e4m3, one scale per row and 1 x 128 group along K). The routed
// row is quantised before W13 and Z = bf16(SwiGLU7(G, U)) before W2 (ops/
// numerics.h fp8_act_scale / fp8_act_quant, the rule the CUDA kernels share);
// each GEMM output is the fp32 sum over its K-blocks of (the fp32 sum of the
// block's e4m3 x e4m3 products, ascending k) * (a_scale * w_scale). The other
// rounding points are the W8A16 reference's (moe.cpp): G/U fp32, Z bf16,
// c = bf16(Y * w), the fp32 combine in ascending expert id, one bf16 rounding.
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
};

// One thread's expert state for combine_routed_experts: the routed row is
// quantised once (row()), then per route G, U (W8A8 GEMVs), Z = bf16(SwiGLU7),
// Z quantised, Y = the W8A8 GEMV with W_down.
struct W8a8Expert {
  const Fp8Matrix &wg, &wu, &wd;
  int64_t dh, de;
  std::vector<float> xq, xs, g, u, z, zq, zs, part;
  W8a8Expert(const Fp8Matrix& g_, const Fp8Matrix& u_, const Fp8Matrix& d_, int64_t dh_, int64_t de_)
      : wg(g_), wu(u_), wd(d_), dh(dh_), de(de_), xq(dh_), xs((dh_ + kFp8ActGroup - 1) / kFp8ActGroup), g(de_),
        u(de_), z(de_), zq(de_), zs((de_ + kFp8ActGroup - 1) / kFp8ActGroup), part(std::max(dh_, de_)) {}
  void row(const float* x) { quantize_groups(x, dh, xq.data(), xs.data()); }
  void route(int64_t f, float* y) {
    wg.gemv(f, xq.data(), xs.data(), part.data(), g.data());
    wu.gemv(f, xq.data(), xs.data(), part.data(), u.data());
    for (int64_t c = 0; c < de; ++c) z[c] = round_bf16(swiglu7_exact_f32(g[c], u[c]));
    quantize_groups(z.data(), de, zq.data(), zs.data());
    wd.gemv(f, zq.data(), zs.data(), part.data(), y);
  }
};

}  // namespace

void moe_experts_w8a8(const MoeExpertsParams& p) {
  const int64_t dh = p.r.size(1) / p.num_heads, de = p.w_gate.size(2);
  const Fp8Matrix wg(p.w_gate, p.w_gate_scale), wu(p.w_up, p.w_up_scale), wd(p.w_down, p.w_down_scale);
  combine_routed_experts(p, [&] { return W8a8Expert(wg, wu, wd, dh, de); });
}

}  // namespace magi2::cpu
