// FP8 routed experts on the CUDA backend (W8A16, docs/fp8.md): the grouped
// path dequantises each routed expert's banks to bf16(q * scale) and runs the
// bf16 grouped GEMMs, so (1) it is bit-identical to the bf16 grouped path on
// the CPU-dequantised banks, (2) it is within the bf16 grouped path's tolerance
// of the CPU FP8 reference (rel-RMS < 2e-2, max-abs < 5 % of the reference's
// max: the GEMMs' fp32 summation order and G/U rounded to bf16), (3) it replays
// bit-identically from a CUDA graph, (4) the same bytes with the banks
// prefetched (Backend::moe_prefetch: dequantised on a side stream), eagerly,
// from a graph, and when the prefetched banks are not the ones that run (on a
// backend with cuDNN attention; beside the own flash kernel the prefetch is off by default). Widths
// that are not multiples of 64 take the general conversion kernel. Also the benchmark helpers
// cuda_fill_random and cuda_memory_stats. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "cuda/backend_cuda.h"
#include "cuda/mhc_moe.h"
#include "cuda_fixture.h"
#include "fp8_expert_fixture.h"
#include "ops/fp8_blocks.h"
#include "ops/ops.h"

namespace magi2 {
namespace {

using test::count_diff;

using Case = test::Fp8ExpertCase;
using CudaFp8ExpertsTest = test::Fp8ExpertTest<8642>;

TEST_F(CudaFp8ExpertsTest, EqualsTheBf16PathOnDequantisedBanksAndIsNearTheCpuReference) {
  // The prefetch runs by default only beside cuDNN attention (with the own flash kernel, the default
  // attention, it is off: backend_cuda.cpp), so this backend uses cuDNN; a default one is checked below.
  gpu_ = make_cuda_backend(0, CudaOptions{.attention = "cudnn"});
  for (const Case c : {Case{127, 64, 64, 4, 16, 4}, Case{90, 64, 72, 2, 8, 3}, Case{200, 256, 1280, 2, 16, 6}}) {
    if (!cuda::MoeExpertsRunner::supports(c.dh, c.de, c.k)) GTEST_SKIP() << "built without CUTLASS";
    print_case(c);
    const test::Fp8ExpertInputs b = fp8_inputs(c, 5);
    const Tensor g16 = dequantize_fp8_blocks(b.g.q, b.g.scale_inv, "W_gate"),
                 u16 = dequantize_fp8_blocks(b.u.q, b.u.scale_inv, "W_up"),
                 d16 = dequantize_fp8_blocks(b.d.q, b.d.scale_inv, "W_down");
    const Shape os{c.t, c.mh * c.dh};
    Tensor o8 = gpu_->alloc(os, DType::BF16), o16 = gpu_->alloc(os, DType::BF16);
    const MoeExpertsParams p8 = fp8_params(c, b, o8, true);
    gpu_->moe_experts(p8);
    gpu_->moe_experts({.r = p8.r, .w_gate = up(g16), .w_up = up(u16), .w_down = up(d16), .idx = p8.idx,
                       .weight = p8.weight, .out = o16, .num_heads = c.mh, .num_experts = c.ne, .top_k = c.k});
    const Tensor got = down(o8);
    EXPECT_EQ(count_diff(got, down(o16), "FP8 vs bf16 grouped on the dequantised banks"), 0);
    // The CPU FP8 reference.
    Tensor oc = Tensor::empty(os, DType::BF16);
    cpu_->moe_experts(fp8_params(c, b, oc, false));
    double se = 0, sr = 0, mx = 0, ref_max = 0;
    for (int64_t i = 0; i < oc.numel(); ++i) {
      const double x = got.get_f32(i), y = oc.get_f32(i);
      se += (x - y) * (x - y);
      sr += y * y;
      mx = std::max(mx, std::fabs(x - y));
      ref_max = std::max(ref_max, std::fabs(y));
    }
    const double rel = std::sqrt(se / std::max(sr, 1e-30));
    std::printf("  FP8 grouped vs CPU FP8: rel-RMS %.3e, max-abs %.3e (ref max %.3e)\n", rel, mx, ref_max);
    EXPECT_LT(rel, 2e-2);
    EXPECT_LT(mx, 0.05 * ref_max);
    gpu_->moe_experts(p8);
    EXPECT_EQ(count_diff(down(o8), got, "FP8 grouped run to run"), 0);
    EXPECT_EQ(count_diff(replay_as_graph([&] { gpu_->moe_experts(p8); }, o8), got, "FP8 grouped graph replay"), 0);
    // Prefetched banks (the fused kernel's W8A16 path; elsewhere a no-op): the same bytes.
    gpu_->moe_prefetch(p8);
    gpu_->moe_experts(p8);
    EXPECT_EQ(count_diff(down(o8), got, "FP8 grouped after a prefetch"), 0);
    EXPECT_EQ(count_diff(replay_as_graph(
                             [&] {
                               gpu_->moe_prefetch(p8);
                               gpu_->moe_experts(p8);
                             },
                             o8),
                         got, "FP8 grouped with a prefetch, graph replay"),
              0);
    // A prefetch of other banks than the ones that run is joined, and the banks that run are
    // dequantised then (here the same bytes at another address).
    gpu_->moe_prefetch(p8);
    MoeExpertsParams moved = p8;
    moved.w_gate = up(b.g.q);
    gpu_->moe_experts(moved);
    EXPECT_EQ(count_diff(down(o8), got, "FP8 grouped after a prefetch of other banks"), 0);
    // A backend with the default attention: the prefetch is off (a no-op), the bytes the same.
    auto auto_be = make_cuda_backend(0);
    auto_be->moe_prefetch(p8);
    auto_be->moe_experts(p8);
    cuda_synchronize(*auto_be);
    EXPECT_EQ(count_diff(down(o8), got, "FP8 grouped, default backend after its (no-op) prefetch"), 0);
  }
}

TEST_F(CudaFp8ExpertsTest, FillRandomAndMemoryStats) {
  Tensor f8 = gpu_->alloc({1 << 20}, DType::F8E4M3), b16 = gpu_->alloc({1 << 20}, DType::BF16);
  cuda_fill_random(*gpu_, f8, 3, 0.f);
  cuda_fill_random(*gpu_, b16, 3, 0.02f);
  const Tensor h8 = down(f8), h16 = down(b16);
  int64_t nan = 0;
  double s = 0, ss = 0;
  for (int64_t i = 0; i < h8.numel(); ++i) nan += std::isnan(h8.get_f32(i));
  for (int64_t i = 0; i < h16.numel(); ++i) {
    const double v = h16.get_f32(i);
    s += v;
    ss += v * v;
  }
  const double n = static_cast<double>(h16.numel()), mean = s / n, sd = std::sqrt(ss / n - mean * mean);
  std::printf("  fill_random bf16: mean %.2e, std %.4e (asked 0.02)\n", mean, sd);
  EXPECT_EQ(nan, 0);
  EXPECT_LT(std::fabs(mean), 1e-3);
  EXPECT_NEAR(sd, 0.02, 0.0005);
  cuda_fill_random(*gpu_, b16, 3, 0.02f);
  EXPECT_EQ(count_diff(down(b16), h16, "fill_random is a function of (seed, i)"), 0);
  const CudaMemoryStats m = cuda_memory_stats(*gpu_);
  EXPECT_GE(m.peak_in_use, m.in_use);
  EXPECT_GE(m.in_use, f8.nbytes() + b16.nbytes());
  EXPECT_GT(m.device_total, m.device_used);
}

}  // namespace
}  // namespace magi2
