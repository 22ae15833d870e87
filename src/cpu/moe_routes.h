// The route loop shared by the CPU routed-expert references (moe.cpp: bf16 and
// W8A16; moe_w8a8.cpp: W8A8): for every (token, head) the routed row in fp32,
// each route's expert output Y, and the deterministic combine (spec §8.4,
// official scatter-back in CSR order): out = bf16(sum over the routes in
// ascending expert id of bf16(Y * weight)), fp32 accumulation.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "cpu/cpu_common.h"
#include "ops/ops.h"

namespace magi2::cpu {

/// Runs the routed experts of checked params. `make_expert()` is called once
/// per OpenMP thread and returns that thread's expert state E with
///   void E::row(const float* x)          x: the routed row [DH] fp32 (valid until the next row())
///   void E::route(int64_t f, float* y)   y [DH] = flat expert f's output for that row (unweighted)
template <typename MakeExpert>
void combine_routed_experts(const MoeExpertsParams& p, const MakeExpert& make_expert) {
  const int mh = p.num_heads, ne = p.num_experts, k = p.top_k;
  const int64_t t = p.r.size(0), dh = p.r.size(1) / mh;
#pragma omp parallel
  {
    auto expert = make_expert();
    std::vector<float> x(dh), y(dh), sum(dh);
    std::vector<std::pair<int, int>> routes(k);
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < t; ++n)
      for (int h = 0; h < mh; ++h) {
        const uint16_t* r = reinterpret_cast<const uint16_t*>(row_ptr(p.r, n)) + h * dh;
        for (int64_t d = 0; d < dh; ++d) x[d] = bf16_bits_to_f32(r[d]);
        expert.row(x.data());
        const int64_t base = (static_cast<int64_t>(h) * t + n) * k;
        for (int j = 0; j < k; ++j) routes[j] = {p.idx.data_as<int32_t>()[base + j], j};
        // Combination order = ascending expert id (CSR order of the official scatter-back).
        std::sort(routes.begin(), routes.end());
        std::fill(sum.begin(), sum.end(), 0.f);
        for (const auto& [e, j] : routes) {
          expert.route(static_cast<int64_t>(h) * ne + e, y.data());
          const float w = p.weight.data_as<float>()[base + j];
          for (int64_t d = 0; d < dh; ++d) sum[d] += round_bf16(y[d] * w);
        }
        uint16_t* o = reinterpret_cast<uint16_t*>(row_ptr(p.out, n)) + h * dh;
        for (int64_t d = 0; d < dh; ++d) o[d] = f32_to_bf16_bits(sum[d]);
      }
  }
}

}  // namespace magi2::cpu
