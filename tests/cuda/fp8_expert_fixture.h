// Shared inputs of the FP8 routed-expert CUDA tests (test_cuda_fp8_experts,
// test_cuda_fp8_w8a8): random rows, block-quantised random banks whose G and U
// have a standard deviation ~3 (both cross the +-7 clamps), and distinct
// random experts per (head, token) from the first half of each head's experts
// only, so the other half has no rows (their per-expert passes are skipped).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_fixture.h"
#include "ops/fp8_blocks.h"
#include "ops/ops.h"

namespace magi2::test {

/// One shape: tokens, d_head, d_expert, MoE heads, experts per head, top-k.
struct Fp8ExpertCase {
  int64_t t, dh, de;
  int mh, ne, k;
};

/// Host inputs of one case.
struct Fp8ExpertInputs {
  Tensor r, idx, weight;  ///< [T, MH*DH] bf16, [MH, T, K] i32, [MH, T, K] f32
  Fp8Blocks g, u, d;      ///< W_gate, W_up [MH*E, DH, DE], W_down [MH*E, DE, DH]
};

/// The fixture: CudaParityTest with the random generator seeded by `Seed`.
template <uint32_t Seed>
class Fp8ExpertTest : public CudaParityTest {
 protected:
  Fp8ExpertTest() : CudaParityTest(Seed) {}

  /// One line naming the case (before its results).
  static void print_case(const Fp8ExpertCase& c) {
    std::printf("[T=%lld heads=%d experts=%d d_head=%lld d_expert=%lld top-%d]\n", static_cast<long long>(c.t),
                c.mh, c.ne, static_cast<long long>(c.dh), static_cast<long long>(c.de), c.k);
  }

  /// Draws the inputs (rows and banks from the fixture's generator, routing from `route_seed`).
  Fp8ExpertInputs fp8_inputs(const Fp8ExpertCase& c, uint32_t route_seed) {
    Fp8ExpertInputs b;
    const float a = 3.f / std::sqrt(static_cast<float>(c.dh)), s = 0.85f / std::sqrt(static_cast<float>(c.de));
    b.r = random({c.t, c.mh * c.dh}, DType::BF16, 0.8f);
    b.g = quantize_fp8_blocks(random({c.mh * c.ne, c.dh, c.de}, DType::BF16, a), "W_gate");
    b.u = quantize_fp8_blocks(random({c.mh * c.ne, c.dh, c.de}, DType::BF16, a), "W_up");
    b.d = quantize_fp8_blocks(random({c.mh * c.ne, c.de, c.dh}, DType::BF16, s), "W_down");
    b.idx = Tensor::empty({c.mh, c.t, c.k}, DType::I32);
    std::mt19937 rng(route_seed);
    std::vector<int32_t> p(c.ne / 2);
    for (int64_t i = 0; i < c.mh * c.t; ++i) {
      std::iota(p.begin(), p.end(), 0);
      std::shuffle(p.begin(), p.end(), rng);
      std::copy(p.begin(), p.begin() + c.k, b.idx.data_as<int32_t>() + i * c.k);
    }
    b.weight = random({c.mh, c.t, c.k}, DType::F32, 0.5f);
    return b;
  }

  /// The op's params with the FP8 banks, on the device (`dev`, fresh copies) or the host.
  MoeExpertsParams fp8_params(const Fp8ExpertCase& c, const Fp8ExpertInputs& b, const Tensor& out, bool dev,
                              Fp8Compute m = Fp8Compute::W8A16) {
    auto on = [&](const Tensor& h) { return dev ? up(h) : h; };
    return {.r = on(b.r), .w_gate = on(b.g.q), .w_up = on(b.u.q), .w_down = on(b.d.q),
            .w_gate_scale = on(b.g.scale_inv), .w_up_scale = on(b.u.scale_inv), .w_down_scale = on(b.d.scale_inv),
            .idx = on(b.idx), .weight = on(b.weight), .out = out, .num_heads = c.mh, .num_experts = c.ne,
            .top_k = c.k, .fp8_compute = m};
  }
};

}  // namespace magi2::test
