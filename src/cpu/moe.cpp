// Multi-head MoE: sigmoid router with expert bias (spec magi2-dit.md §8.2,
// official inference/flash_mh_moe/route.py) and the routed experts with their
// deterministic combination (spec §8.3-8.4, §11.1; official
// inference/flash_mh_moe/triton/mh_moe_fwd.py in deterministic mode).
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "cpu/moe_routes.h"
#include "ops/fp8_blocks.h"
#include "ops/numerics.h"

namespace magi2::cpu {

void moe_route(const MoeRouteParams& p) {
  const int64_t t = p.r.size(0);
  const int mh = p.num_heads, ne = p.num_experts, k = p.top_k;
  MAGI2_CHECK(mh > 0 && ne > 0 && k > 0 && k <= ne, "moe_route: bad head/expert/top-k counts");
  const int64_t dh = p.r.size(1) / mh;
  check_2d(p.r, t, mh * dh, "moe_route.r");
  MAGI2_CHECK(p.r.dtype() == DType::BF16, "moe_route.r: expected bf16");
  MAGI2_CHECK(p.gate.dtype() == DType::F32 && p.gate.shape() == Shape({mh * ne, dh}),
              "moe_mlp.gate: expected [", mh * ne, ", ", dh, "] f32, got ", shape_str(p.gate.shape()));
  MAGI2_CHECK(p.bias.dtype() == DType::F32 && p.bias.numel() == mh * ne, "router bias: expected ", mh * ne,
              " f32 values");
  const Shape out_shape{mh, t, k};
  MAGI2_CHECK(p.idx.dtype() == DType::I32 && p.idx.shape() == out_shape, "moe_route.idx: expected I32 ",
              shape_str(out_shape));
  MAGI2_CHECK(p.weight.dtype() == DType::F32 && p.weight.shape() == out_shape,
              "moe_route.weight: expected F32 ", shape_str(out_shape));
  if (p.forced_idx.defined())
    MAGI2_CHECK(p.forced_idx.dtype() == DType::I32 && p.forced_idx.shape() == out_shape,
                "forced routing: expected I32 ", shape_str(out_shape), ", got ", shape_str(p.forced_idx.shape()));
  if (p.margin.defined())
    MAGI2_CHECK(p.margin.dtype() == DType::F32 && p.margin.shape() == Shape({mh, t}), "moe_route.margin shape");
  const float* gate = p.gate.data_as<float>();
  const float* bias = p.bias.data_as<float>();
  int32_t* idx_out = p.idx.data_as<int32_t>();
  float* w_out = p.weight.data_as<float>();
  bool bad_forced = false;
#pragma omp parallel
  {
    std::vector<float> x(dh), score(ne), sel(ne);
    std::vector<int> order(ne);
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < t; ++n)
      for (int h = 0; h < mh; ++h) {
        const uint16_t* r = reinterpret_cast<const uint16_t*>(row_ptr(p.r, n)) + h * dh;
        for (int64_t d = 0; d < dh; ++d) x[d] = bf16_bits_to_f32(r[d]);
        for (int e = 0; e < ne; ++e) {
          score[e] = sigmoid_f32(dot_f32(x.data(), gate + (static_cast<int64_t>(h) * ne + e) * dh, dh));
          sel[e] = score[e] + bias[h * ne + e];
        }
        const int64_t base = (static_cast<int64_t>(h) * t + n) * k;
        int32_t* idx = idx_out + base;
        // Descending selection score, lowest expert id first on exact ties; NaN
        // ranks first (spec §8.2, as torch.topk and the fused routing kernel),
        // which also keeps the comparator a strict weak order.
        for (int e = 0; e < ne; ++e) order[e] = e;
        const int take = std::min(k + 1, ne);
        std::partial_sort(order.begin(), order.begin() + take, order.end(), [&](int a, int b) {
          const bool na = std::isnan(sel[a]), nb = std::isnan(sel[b]);
          if (na || nb) return na && (!nb || a < b);
          if (sel[a] != sel[b]) return sel[a] > sel[b];
          return a < b;
        });
        if (p.margin.defined())
          p.margin.data_as<float>()[h * t + n] = k < ne ? sel[order[k - 1]] - sel[order[k]] : INFINITY;
        if (p.forced_idx.defined()) {
          const int32_t* f = p.forced_idx.data_as<int32_t>() + base;
          for (int j = 0; j < k; ++j) {
            if (f[j] < 0 || f[j] >= ne) bad_forced = true;
            idx[j] = std::clamp(f[j], 0, ne - 1);
          }
        } else {
          for (int j = 0; j < k; ++j) idx[j] = order[j];
        }
        float l1 = 0.f;
        for (int j = 0; j < k; ++j) l1 += std::fabs(score[idx[j]]);
        const float denom = p.normalize ? std::max(l1, 1e-12f) : 1.0f;
        for (int j = 0; j < k; ++j) {
          const float pn = p.normalize ? score[idx[j]] / denom : score[idx[j]];
          w_out[base + j] = pn * p.route_scale;
        }
      }
  }
  MAGI2_CHECK(!bad_forced, "forced routing: expert index out of range [0, ", ne, ")");
}

namespace {

// Element (row, col) of flat expert f's [rows, cols] matrix as the fp32 value
// the expert GEMMs multiply by: the bf16 weight, or for FP8 banks
// bf16(q * scale) (ops/numerics.h fp8_dequant_f32, the CUDA dequantiser's value).
struct Bf16Bank {
  const uint16_t* w;
  int64_t rows, cols;
  float operator()(int64_t f, int64_t r, int64_t c) const { return bf16_bits_to_f32(w[(f * rows + r) * cols + c]); }
};
struct Fp8Bank {
  const uint8_t* q;
  const float* scale;
  int64_t rows, cols, brows, bcols;
  Fp8Bank(const Tensor& t, const Tensor& s)
      : q(t.data_as<uint8_t>()), scale(s.data_as<float>()), rows(t.size(1)), cols(t.size(2)),
        brows(s.size(1)), bcols(s.size(2)) {}
  float operator()(int64_t f, int64_t r, int64_t c) const {
    const float sc = scale[(f * brows + r / kFp8Block) * bcols + c / kFp8Block];
    return round_bf16(fp8_dequant_f32(q[(f * rows + r) * cols + c], sc));
  }
};

// One thread's expert state for combine_routed_experts, the banks read through
// `Bank`: G = x W_gate[f], U = x W_up[f] (fp32), Z = bf16(SwiGLU7(G, U)),
// Y = Z W_down[f] (fp32).
template <typename Bank>
struct Bf16Expert {
  const Bank &wg, &wu, &wd;
  int64_t dh, de;
  std::vector<float> g, u, z;
  const float* x = nullptr;
  Bf16Expert(const Bank& g_, const Bank& u_, const Bank& d_, int64_t dh_, int64_t de_)
      : wg(g_), wu(u_), wd(d_), dh(dh_), de(de_), g(de_), u(de_), z(de_) {}
  void row(const float* xr) { x = xr; }
  void route(int64_t f, float* y) {
    std::fill(g.begin(), g.end(), 0.f);
    std::fill(u.begin(), u.end(), 0.f);
    for (int64_t d = 0; d < dh; ++d) {
      const float xd = x[d];
      for (int64_t c = 0; c < de; ++c) {
        g[c] += xd * wg(f, d, c);
        u[c] += xd * wu(f, d, c);
      }
    }
    for (int64_t c = 0; c < de; ++c) z[c] = round_bf16(swiglu7_exact_f32(g[c], u[c]));
    std::fill(y, y + dh, 0.f);
    for (int64_t c = 0; c < de; ++c) {
      const float zc = z[c];
      for (int64_t d = 0; d < dh; ++d) y[d] += zc * wd(f, c, d);
    }
  }
};

// The routed experts of every (token, head) with the banks read through `Bank`.
template <typename Bank>
void run_experts(const MoeExpertsParams& p, int64_t dh, int64_t de, const Bank& wg, const Bank& wu, const Bank& wd) {
  combine_routed_experts(p, [&] { return Bf16Expert<Bank>(wg, wu, wd, dh, de); });
}

}  // namespace

void moe_experts(const MoeExpertsParams& p) {
  const int64_t t = p.r.size(0);
  const int mh = p.num_heads, ne = p.num_experts, k = p.top_k;
  MAGI2_CHECK(mh > 0 && ne > 0 && k > 0, "moe_experts: bad head/expert/top-k counts");
  MAGI2_CHECK(p.bank_layout == ExpertBankLayout::Checkpoint, "moe_experts: the CPU backend reads expert banks in "
              "the checkpoint's layout, not the CUDA W8A8 kernel's K-major one");
  const int64_t dh = p.r.size(1) / mh;
  check_2d(p.r, t, mh * dh, "moe_experts.r");
  check_2d(p.out, t, mh * dh, "moe_experts.out");
  MAGI2_CHECK(p.r.dtype() == DType::BF16 && p.out.dtype() == DType::BF16, "moe_experts: r and out must be bf16");
  const int64_t de = p.w_gate.dim() == 3 ? p.w_gate.size(2) : 0;
  const Shape up_shape{static_cast<int64_t>(mh) * ne, dh, de};
  const Shape down_shape{static_cast<int64_t>(mh) * ne, de, dh};
  const bool fp8 = p.w_gate.dtype() == DType::F8E4M3;
  const DType wt = fp8 ? DType::F8E4M3 : DType::BF16;
  MAGI2_CHECK(p.w_gate.dtype() == wt && p.w_gate.shape() == up_shape && p.w_up.shape() == up_shape &&
                  p.w_up.dtype() == wt,
              "moe_mlp.W_gate/W_up: expected ", shape_str(up_shape), " ", dtype_name(wt));
  MAGI2_CHECK(p.w_down.dtype() == wt && p.w_down.shape() == down_shape, "moe_mlp.W_down: expected ",
              shape_str(down_shape), " ", dtype_name(wt), ", got ", shape_str(p.w_down.shape()));
  if (fp8) {
    check_fp8_pair(p.w_gate, p.w_gate_scale, "moe_mlp.W_gate");
    check_fp8_pair(p.w_up, p.w_up_scale, "moe_mlp.W_up");
    check_fp8_pair(p.w_down, p.w_down_scale, "moe_mlp.W_down");
  }
  const Shape route_shape{mh, t, k};
  MAGI2_CHECK(p.idx.shape() == route_shape && p.idx.dtype() == DType::I32 && p.weight.shape() == route_shape &&
                  p.weight.dtype() == DType::F32,
              "moe_experts: idx/weight must be ", shape_str(route_shape));
  // Checked up front: the expert loop below indexes weight banks with these.
  for (int64_t i = 0; i < p.idx.numel(); ++i) {
    const int32_t e = p.idx.data_as<int32_t>()[i];
    MAGI2_CHECK(e >= 0 && e < ne, "moe_experts.idx: expert index ", e, " out of range [0, ", ne, ")");
  }
  if (fp8 && p.fp8_compute == Fp8Compute::W8A8) {
    moe_experts_w8a8(p);
  } else if (fp8) {
    run_experts(p, dh, de, Fp8Bank(p.w_gate, p.w_gate_scale), Fp8Bank(p.w_up, p.w_up_scale),
                Fp8Bank(p.w_down, p.w_down_scale));
  } else {
    run_experts(p, dh, de, Bf16Bank{p.w_gate.data_as<uint16_t>(), dh, de},
                Bf16Bank{p.w_up.data_as<uint16_t>(), dh, de}, Bf16Bank{p.w_down.data_as<uint16_t>(), de, dh});
  }
  if (p.out8.defined()) write_fp8_rows(p.out, p.out8, "moe_experts.out8");
}

}  // namespace magi2::cpu
