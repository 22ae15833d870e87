// Shared fixture of the CUDA backend tests: a CUDA and a CPU backend side by
// side, random inputs, host <-> device copies, poisoned outputs, and the
// byte-difference count the parity tests report. Skips without a GPU.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "cuda/backend_cuda.h"
#include "cuda/fused_kernels.h"
#include "ops/ops.h"

namespace magi2::test {

/// gpu_ = make_cuda_backend(0), cpu_ = make_cpu_backend(); GTEST_SKIP when no GPU.
class CudaParityTest : public ::testing::Test {
 protected:
  explicit CudaParityTest(uint32_t seed = 1234) : rng_(seed) {}

  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU present";
    gpu_ = make_cuda_backend(0);
    cpu_ = make_cpu_backend();
  }

  /// Random CPU tensor: N(0, sigma) rounded to the dtype (F32 or BF16; fresh draws per call).
  Tensor random(const Shape& shape, DType dt, float sigma = 1.f) {
    Tensor t = Tensor::empty(shape, dt);
    std::normal_distribution<float> nd(0.f, sigma);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float v = nd(rng_);
      if (dt == DType::F32)
        t.data_as<float>()[i] = v;
      else
        t.data_as<uint16_t>()[i] = f32_to_bf16_bits(v);
    }
    return t;
  }
  /// CPU tensor -> new device tensor.
  Tensor up(const Tensor& h) {
    Tensor d = gpu_->alloc(h.shape(), h.dtype());
    gpu_->copy({.src = h, .dst = d});
    return d;
  }
  /// Device tensor (contiguous or a 2-D view) -> new contiguous CPU tensor.
  Tensor down(const Tensor& d) {
    Tensor h = Tensor::empty(d.shape(), d.dtype());
    gpu_->copy({.src = d, .dst = h});
    return h;
  }
  /// Device tensor filled with poison (NaN bits) so unwritten outputs show.
  Tensor poisoned(const Shape& shape, DType dt) {
    Tensor h = Tensor::empty(shape, dt);
    std::memset(h.data(), 0xff, h.nbytes());
    return up(h);
  }

  /// Outputs of one moe_route on each backend: idx [mh, t, k] i32, weight
  /// [mh, t, k] f32 and margin [mh, t] f32 on the CPU (ic, wc, mc), then the
  /// same poisoned on the device (ig, wg, mg).
  struct RouteOutputs {
    Tensor ic, wc, mc, ig, wg, mg;
  };
  RouteOutputs route_outputs(int mh, int64_t t, int k) {
    return {Tensor::empty({mh, t, k}, DType::I32), Tensor::empty({mh, t, k}, DType::F32),
            Tensor::empty({mh, t}, DType::F32),    poisoned({mh, t, k}, DType::I32),
            poisoned({mh, t, k}, DType::F32),      poisoned({mh, t}, DType::F32)};
  }

  /// Captures `step` (ops on gpu_) into a CUDA graph, zeroes `out`, replays the
  /// graph once and returns `out` on the host (compare with the eager result).
  Tensor replay_as_graph(const std::function<void()>& step, const Tensor& out) {
    auto s = static_cast<cudaStream_t>(cuda_stream_of(*gpu_));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    step();
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    gpu_->zero(out);
    EXPECT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    Tensor h = down(out);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return h;
  }

  std::unique_ptr<Backend> gpu_, cpu_;
  std::mt19937 rng_;
};

/// Scratch for the opt-in fast kernels (cuda/fused_kernels.h) from `be`'s device memory.
inline std::unique_ptr<cuda::SplitScratch> split_scratch_on(Backend& be) {
  return std::make_unique<cuda::SplitScratch>([&be](size_t bytes) {
    Tensor t = be.alloc({static_cast<int64_t>((bytes + 1) / 2)}, DType::BF16);
    return std::shared_ptr<void>(t.data(), [t](void*) {});
  });
}

/// Forced routing [mh, t, k] int32: k distinct experts of [0, ne) per (head, token),
/// a seeded shuffle (not in any score order).
inline Tensor random_routes(int mh, int64_t t, int ne, int k, uint32_t seed) {
  Tensor forced = Tensor::empty({mh, t, k}, DType::I32);
  std::mt19937 rng(seed);
  std::vector<int32_t> p(ne);
  for (int64_t i = 0; i < mh * t; ++i) {
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), rng);
    std::copy(p.begin(), p.begin() + k, forced.data_as<int32_t>() + i * k);
  }
  return forced;
}

/// One router test shape: t tokens, mh heads of dh dims, ne experts per head, top-k.
struct RouteCase {
  int64_t t, dh;
  int mh, ne, k;
};

/// Prints the case as "[T=.. heads=.. experts=.. d_head=.. top-k]".
inline void print_route_case(const RouteCase& rc) {
  std::printf("[T=%lld heads=%d experts=%d d_head=%lld top-%d]\n", static_cast<long long>(rc.t), rc.mh, rc.ne,
              static_cast<long long>(rc.dh), rc.k);
}

/// Plants the router's hard cases into CPU tensors gate [mh*ne, dh] f32 and
/// bias [mh*ne] f32: head 0 gets zero gate rows (every logit exactly 0, so its
/// scores tie) and bias values with exact ties; head 1 two NaN biases
/// (experts 2 and 5; needs ne > 5).
inline void plant_route_ties(Tensor& gate, Tensor& bias, int ne, int64_t dh) {
  for (int e = 0; e < ne; ++e) {
    bias.data_as<float>()[e] = 0.1f * static_cast<float>((e * 7) % 5);
    for (int64_t i = 0; i < dh; ++i) gate.data_as<float>()[e * dh + i] = 0.f;
  }
  bias.data_as<float>()[ne + 5] = NAN, bias.data_as<float>()[ne + 2] = NAN;
}

/// Coordinates of a latent video (f frames x hh rows x ww cols, reference
/// size `ref`) as rope_table's [T + 3, 9] f32 rows, plus 3 tokens of other
/// sizes (a text-like one, a long audio-like one, odd ratios).
inline Tensor video_coords(int64_t f, int64_t hh, int64_t ww, const std::array<float, 3>& ref) {
  const int64_t t = f * hh * ww;
  Tensor c = Tensor::empty({t + 3, 9}, DType::F32);
  float* p = c.data_as<float>();
  for (int64_t n = 0; n < t; ++n) {
    const float row[9] = {static_cast<float>(n / (hh * ww)), static_cast<float>((n / ww) % hh),
                          static_cast<float>(n % ww), static_cast<float>(f), static_cast<float>(hh),
                          static_cast<float>(ww), ref[0], ref[1], ref[2]};
    std::memcpy(p + n * 9, row, sizeof row);
  }
  const float extra[3][9] = {{3, 0, 0, 1, 1, 1, 1, 1, 1}, {250.5f, 0, 0, 300, 1, 1, 300, 1, 1},
                             {7, 2, 5, 9, 4, 11, 17, 33, 57}};
  std::memcpy(p + t * 9, extra, sizeof extra);
  return c;
}

/// Prints and returns the number of elements whose bytes differ.
inline int64_t count_diff(const Tensor& a, const Tensor& b, const char* what) {
  EXPECT_EQ(a.nbytes(), b.nbytes());
  const size_t e = dtype_size(a.dtype());
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(static_cast<const char*>(a.data()) + i * e, static_cast<const char*>(b.data()) + i * e, e) != 0)
      ++n;
  std::printf("%s: %lld of %lld elements differ\n", what, static_cast<long long>(n),
              static_cast<long long>(a.numel()));
  return n;
}

}  // namespace magi2::test
