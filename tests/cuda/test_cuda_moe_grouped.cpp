// The routed experts' grouped GEMM path of the CUDA backend (src/cuda/moe_grouped.cu)
// against the CPU reference with forced routing (bf16 tolerance: the GEMMs sum
// in another order and round G/U to bf16 before SwiGLU7), against the bit-exact
// scalar kernel on skewed routing, run to run and from a CUDA graph (bit
// identical), and its refusal to plan during capture. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cuda/backend_cuda.h"
#include "cuda/mhc_moe.h"
#include "cuda_fixture.h"
#include "ops/ops.h"

namespace magi2 {
namespace {

using test::count_diff;

struct Shape6 {
  int64_t t, dh, de;
  int mh, ne, k;
};

class CudaMoeGroupedTest : public test::CudaParityTest {
 protected:
  CudaMoeGroupedTest() : CudaParityTest(4321) {}

  // Host routing: distinct random experts per (head, token), a repeated expert
  // every 17th pair; with `hot` >= 0 slot 0 of head 0 always picks expert `hot`.
  Tensor routing(const Shape6& c, int hot) {
    Tensor idx = Tensor::empty({c.mh, c.t, c.k}, DType::I32);
    std::mt19937 rng(11);
    std::vector<int32_t> p(c.ne);
    for (int64_t i = 0; i < c.mh * c.t; ++i) {
      std::iota(p.begin(), p.end(), 0);
      std::shuffle(p.begin(), p.end(), rng);
      if (hot >= 0 && i < c.t) std::swap(p[0], *std::find(p.begin(), p.end(), hot));
      std::copy(p.begin(), p.begin() + c.k, idx.data_as<int32_t>() + i * c.k);
      if (i % 17 == 5) idx.data_as<int32_t>()[i * c.k + 1] = idx.data_as<int32_t>()[i * c.k];
    }
    return idx;
  }

  struct Inputs {
    Tensor r, w_gate, w_up, w_down, idx, weight;  // host
  };
  Inputs inputs(const Shape6& c, int hot) {
    const float a = 6.f / std::sqrt(static_cast<float>(c.dh)), b = 1.7f / std::sqrt(static_cast<float>(c.de));
    Inputs in;
    in.r = random({c.t, c.mh * c.dh}, DType::BF16, 0.8f);
    in.w_gate = random({c.mh * c.ne, c.dh, c.de}, DType::BF16, a * 0.5f);
    in.w_up = random({c.mh * c.ne, c.dh, c.de}, DType::BF16, a * 0.5f);
    in.w_down = random({c.mh * c.ne, c.de, c.dh}, DType::BF16, b * 0.5f);
    in.idx = routing(c, hot);
    in.weight = random({c.mh, c.t, c.k}, DType::F32, 0.5f);
    return in;
  }
  MoeExpertsParams device(const Shape6& c, const Inputs& in, const Tensor& out) {
    return {.r = up(in.r), .w_gate = up(in.w_gate), .w_up = up(in.w_up), .w_down = up(in.w_down),
            .idx = up(in.idx), .weight = up(in.weight), .out = out, .num_heads = c.mh, .num_experts = c.ne,
            .top_k = c.k};
  }
  cudaStream_t stream() { return static_cast<cudaStream_t>(cuda_stream_of(*gpu_)); }

  // rel-RMS and max-abs of a - ref (bf16 tensors of equal shape), printed.
  static std::pair<double, double> error_of(const Tensor& a, const Tensor& ref, const char* what) {
    double se = 0, sr = 0, mx = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      const double x = bf16_bits_to_f32(a.data_as<uint16_t>()[i]), y = bf16_bits_to_f32(ref.data_as<uint16_t>()[i]);
      se += (x - y) * (x - y);
      sr += y * y;
      mx = std::max(mx, std::fabs(x - y));
    }
    const double rel = std::sqrt(se / std::max(sr, 1e-30));
    std::printf("  %s: rel-RMS %.3e, max-abs %.3e, ref RMS %.3e\n", what, rel, mx,
                std::sqrt(sr / static_cast<double>(ref.numel())));
    return {rel, mx};
  }

  // The routed experts of `c` (routing `hot`) through the grouped W13 + the
  // SwiGLU7 pass and through `kind`, into poisoned outputs (every element must
  // be written); `check` gets both outputs on the host and a re-run of `kind`.
  void against_grouped(const Shape6& c, int hot, cuda::MoeExpertsRunner::W13Kernel kind,
                       const std::function<void(const Tensor& ref, const Tensor& got,
                                                const std::function<Tensor()>& again)>& check) {
    std::printf("[T=%lld d_expert=%lld hot=%d]\n", static_cast<long long>(c.t), static_cast<long long>(c.de), hot);
    const Inputs in = inputs(c, hot);
    auto device_alloc = [](size_t bytes) {
      void* ptr = nullptr;
      EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess);
      return std::shared_ptr<void>(ptr, [](void* q) { cudaFree(q); });
    };
    cuda::MoeExpertsRunner grouped(device_alloc, CudaOptions::kDefaultMoeMaxRows,
                                   cuda::MoeExpertsRunner::W13Kernel::kGrouped);
    cuda::MoeExpertsRunner other(device_alloc, CudaOptions::kDefaultMoeMaxRows, kind);
    Tensor og = poisoned({c.t, c.mh * c.dh}, DType::BF16), oo = poisoned({c.t, c.mh * c.dh}, DType::BF16);
    MoeExpertsParams p = device(c, in, og);
    cuda::moe_experts(p, &grouped, stream());
    p.out = oo;
    cuda::moe_experts(p, &other, stream());
    check(down(og), down(oo), [&] {
      cuda::moe_experts(p, &other, stream());
      return down(oo);
    });
  }
};

TEST_F(CudaMoeGroupedTest, ForcedRoutingWithinBf16ToleranceOfCpu) {
  for (const Shape6 c : {Shape6{127, 64, 64, 4, 16, 4}, Shape6{200, 256, 1280, 2, 16, 6}}) {
    if (!cuda::MoeExpertsRunner::supports(c.dh, c.de, c.k)) GTEST_SKIP() << "built without CUTLASS";
    std::printf("[T=%lld heads=%d experts=%d d_head=%lld d_expert=%lld top-%d]\n", static_cast<long long>(c.t),
                c.mh, c.ne, static_cast<long long>(c.dh), static_cast<long long>(c.de), c.k);
    const Inputs in = inputs(c, -1);
    Tensor oc = Tensor::empty({c.t, c.mh * c.dh}, DType::BF16);
    cpu_->moe_experts({.r = in.r, .w_gate = in.w_gate, .w_up = in.w_up, .w_down = in.w_down, .idx = in.idx,
                       .weight = in.weight, .out = oc, .num_heads = c.mh, .num_experts = c.ne, .top_k = c.k});
    Tensor og = poisoned({c.t, c.mh * c.dh + 8}, DType::BF16);
    const MoeExpertsParams p = device(c, in, og.slice_cols(8, 8 + c.mh * c.dh));
    gpu_->moe_experts(p);
    const Tensor first = down(og.slice_cols(8, 8 + c.mh * c.dh));
    const auto [rel, mx] = error_of(first, oc, "grouped vs CPU");
    EXPECT_LT(rel, 2e-2);
    double ref_max = 0;
    for (int64_t i = 0; i < oc.numel(); ++i)
      ref_max = std::max(ref_max, static_cast<double>(std::fabs(bf16_bits_to_f32(oc.data_as<uint16_t>()[i]))));
    EXPECT_LT(mx, 0.05 * ref_max);
    gpu_->moe_experts(p);
    EXPECT_EQ(count_diff(down(og.slice_cols(8, 8 + c.mh * c.dh)), first, "grouped run to run"), 0);
  }
}

TEST_F(CudaMoeGroupedTest, SkewedRoutingMatchesTheExactKernel) {
  // One expert of head 0 takes every token's first route (t rows).
  const Shape6 c{4096, 256, 1280, 2, 16, 6};
  if (!cuda::MoeExpertsRunner::supports(c.dh, c.de, c.k)) GTEST_SKIP() << "built without CUTLASS";
  const Inputs in = inputs(c, 3);
  Tensor og = gpu_->alloc({c.t, c.mh * c.dh}, DType::BF16), oe = gpu_->alloc({c.t, c.mh * c.dh}, DType::BF16);
  const MoeExpertsParams p = device(c, in, og);
  MoeExpertsParams pe = p;
  pe.out = oe;
  gpu_->moe_experts(p);
  cuda::moe_experts(pe, nullptr, stream());
  const auto [rel, mx] = error_of(down(og), down(oe), "skewed grouped vs exact");
  EXPECT_LT(rel, 2e-2);
}

// A call over more rows than CudaOptions::moe_max_rows runs in token passes
// over one pass's workspace (what lets 540p fit beside the FP8 model); the
// bytes must not depend on the number of passes, in a graph too.
TEST_F(CudaMoeGroupedTest, TokenPassesGiveTheSameBytes) {
  const Shape6 c{1000, 256, 1280, 2, 16, 6};  // 12,000 routed rows
  if (!cuda::MoeExpertsRunner::supports(c.dh, c.de, c.k)) GTEST_SKIP() << "built without CUTLASS";
  const Inputs in = inputs(c, 3);
  Tensor one = gpu_->alloc({c.t, c.mh * c.dh}, DType::BF16);
  MoeExpertsParams p = device(c, in, one);
  gpu_->moe_experts(p);  // the default cap: one pass
  const Tensor ref = down(one);
  auto device_alloc = [](size_t bytes) {
    void* ptr = nullptr;
    EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess);
    return std::shared_ptr<void>(ptr, [](void* q) { cudaFree(q); });
  };
  // 3,001 rows: 250 tokens a pass (4 passes); 5,000: 334 + 334 + 332; 7: one token a pass.
  for (const int64_t cap : {int64_t{3001}, int64_t{5000}, int64_t{7}}) {
    cuda::MoeExpertsRunner runner(device_alloc, cap);
    std::printf("  cap %lld rows: %lld tokens a pass\n", static_cast<long long>(cap),
                static_cast<long long>(runner.pass_tokens(c.t, c.mh, c.k)));
    Tensor o = poisoned({c.t, c.mh * c.dh}, DType::BF16);
    p.out = o;
    cuda::moe_experts(p, &runner, stream());
    EXPECT_EQ(count_diff(down(o), ref, "token passes vs one pass"), 0) << "cap " << cap;
    if (cap == 5000) {
      EXPECT_EQ(count_diff(replay_as_graph([&] { cuda::moe_experts(p, &runner, stream()); }, o), ref,
                           "token passes, graph replay"), 0);
    }
  }
}

// The whole expert in one kernel (W13Kernel::kFused, moe_expert_fused.h): the
// same rounding points (G, U, Z, bf16(Y x w)) and each element one fp32 wgmma
// chain over k in ascending 16-blocks, as the grouped GEMMs, so the same
// bytes; skewed routing, partial 128-row tiles, experts without rows and a
// d_expert of 3 chunk pairs included; every output element written (poisoned).
TEST_F(CudaMoeGroupedTest, FusedExpertsGiveTheGroupedBytes) {
  for (const Shape6 c : {Shape6{1000, 256, 1280, 2, 16, 6}, Shape6{300, 256, 192, 3, 40, 2}}) {
    if (!cuda::MoeExpertsRunner::supports(c.dh, c.de, c.k)) GTEST_SKIP() << "built without CUTLASS";
    for (const int hot : {-1, 3})
      against_grouped(c, hot, cuda::MoeExpertsRunner::W13Kernel::kFused,
                      [](const Tensor& ref, const Tensor& got, const std::function<Tensor()>& again) {
                        const auto [rel, mx] = error_of(got, ref, "fused experts vs grouped");
                        EXPECT_LT(rel, 4e-3);
                        EXPECT_EQ(count_diff(got, ref, "fused experts vs grouped"), 0);
                        EXPECT_EQ(count_diff(again(), got, "fused run to run"), 0);
                      });
  }
}

// SwiGLU7 in the gate GEMM's epilogue and the routing weight in W2's
// (W13Kernel::kEpilogue): the same GEMM tiles and rounding points as the
// grouped W13 + the SwiGLU7 pass + the fp32 W2 and weighted combine, so the
// same bytes; skewed routing, partial tiles and experts without rows included.
TEST_F(CudaMoeGroupedTest, Swiglu7EpilogueGivesTheGroupedBytes) {
  for (const Shape6 c : {Shape6{1000, 256, 1280, 2, 16, 6}, Shape6{300, 64, 192, 3, 40, 2}}) {
    if (!cuda::MoeExpertsRunner::supports(c.dh, c.de, c.k)) GTEST_SKIP() << "built without CUTLASS";
    for (const int hot : {-1, 3})
      against_grouped(c, hot, cuda::MoeExpertsRunner::W13Kernel::kEpilogue,
                      [](const Tensor& ref, const Tensor& got, const std::function<Tensor()>&) {
                        EXPECT_EQ(count_diff(got, ref, "SwiGLU7 epilogue vs grouped"), 0);
                      });
  }
}

TEST_F(CudaMoeGroupedTest, ReplaysFromACudaGraphAndRefusesToPlanDuringCapture) {
  const Shape6 c{300, 64, 128, 3, 8, 2};
  if (!cuda::MoeExpertsRunner::supports(c.dh, c.de, c.k)) GTEST_SKIP() << "built without CUTLASS";
  const Inputs in = inputs(c, -1);
  Tensor out = gpu_->alloc({c.t, c.mh * c.dh}, DType::BF16);
  const MoeExpertsParams p = device(c, in, out);
  // A fresh shape during capture: planning would allocate, so the op refuses.
  {
    const Shape6 c2{301, 64, 128, 3, 8, 2};
    const Inputs in2 = inputs(c2, -1);
    const MoeExpertsParams p2 = device(c2, in2, gpu_->alloc({c2.t, c2.mh * c2.dh}, DType::BF16));
    cuda_synchronize(*gpu_);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
    std::string msg;
    try {
      gpu_->moe_experts(p2);
    } catch (const Error& e) {
      msg = e.what();
    }
    ASSERT_EQ(cudaStreamEndCapture(stream(), &graph), cudaSuccess);
    if (graph != nullptr) cudaGraphDestroy(graph);
    EXPECT_NE(msg.find("before capturing"), std::string::npos) << msg;
  }
  gpu_->moe_experts(p);  // eager: plans the workspace for this shape
  const Tensor eager = down(out);
  EXPECT_EQ(count_diff(replay_as_graph([&] { gpu_->moe_experts(p); }, out), eager, "grouped graph replay"), 0);
}

}  // namespace
}  // namespace magi2
