// One op test table for every backend (issue 9 item 6, in the spirit of
// llama.cpp's test-backend-ops): each entry of tests/cuda/ops_table.cpp runs on
// the CPU reference backend and on CUDA from the same seeded inputs, and the
// outputs are compared with the tolerance the entry states; one line per entry.
// With MAGI2_OPS_PERF=1 a second test times every entry on CUDA (CUDA events,
// 2 warm-ups, median of 10) against ceilings measured in the same run: a
// device-to-device copy (GB/s) and a cuBLASLt bf16 8192^3 linear (TFLOP/s). A
// test asserts, a benchmark reports: the timing test asserts nothing.
// Skips when no GPU is present (CI). docs/cuda.md.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "cuda/backend_cuda.h"
#include "cuda_fixture.h"
#include "ops/ops.h"
#include "ops_table.h"
#include "util/testing.h"

namespace magi2 {
namespace {

using test::OpCase;
using test::OpEntry;
using test::Tolerance;
using test::TolKind;

class CudaBackendOpsTest : public test::CudaParityTest {};

/// Outcome of comparing one entry: its metric as text and whether it is within tolerance.
struct Verdict {
  std::string metric;
  bool pass = true;
};

/// The ulp of `dt` (bf16: 8 significant bits, f32: 24) at |v|, for normal values.
double ulp_at(double v, DType dt) {
  int e = 0;
  std::frexp(std::max(std::fabs(v), 1e-37), &e);  // |v| = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - (dt == DType::BF16 ? 8 : 24));
}

/// Judges `got` against the reference `want` (host tensors, pairwise same shape and dtype).
Verdict judge(const Tolerance& tol, const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  char buf[160];
  Verdict v;
  if (tol.kind == TolKind::Exact) {
    int64_t diff = 0, total = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += test::differing_elements(got[i], want[i]), total += want[i].numel();
    std::snprintf(buf, sizeof buf, "%lld of %lld differ (bit-exact, <= %lld allowed)", static_cast<long long>(diff),
                  static_cast<long long>(total), static_cast<long long>(tol.allowed));
    v.pass = diff <= tol.allowed;
  } else if (tol.kind == TolKind::Ulp) {
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (want[i].dtype() == DType::I32) {
        if (test::differing_elements(got[i], want[i]) != 0) worst = std::numeric_limits<double>::infinity();
        continue;
      }
      const Tensor g = got[i].to(DType::F32), w = want[i].to(DType::F32);
      double ss = 0;
      for (int64_t j = 0; j < w.numel(); ++j) ss += double(w.data_as<float>()[j]) * w.data_as<float>()[j];
      const double floor = std::sqrt(ss / double(std::max<int64_t>(w.numel(), 1))) / 64;
      for (int64_t j = 0; j < w.numel(); ++j) {
        const float a = g.data_as<float>()[j], b = w.data_as<float>()[j];
        if (std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b))) continue;
        const double u = std::isfinite(a) && std::isfinite(b)
                             ? std::fabs(double(a) - b) / ulp_at(std::max<double>(std::fabs(b), floor), want[i].dtype())
                             : std::numeric_limits<double>::infinity();
        worst = std::max(worst, u);
      }
    }
    std::snprintf(buf, sizeof buf, "max %.2f ulp (<= %.0f, ulp floored at rms/64)", worst, tol.ulp);
    v.pass = worst <= tol.ulp;
  } else {
    double rel = 0, mx = 0, bound = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (want[i].dtype() == DType::I32) {  // indices (expert selections): exact, as in the ulp branch
        if (test::differing_elements(got[i], want[i]) != 0) v.pass = false, mx = std::numeric_limits<double>::infinity();
        continue;
      }
      const Tensor g = got[i].to(DType::F32), w = want[i].to(DType::F32);
      double se = 0, sr = 0, m = 0, ref_max = 0;
      for (int64_t j = 0; j < w.numel(); ++j) {
        const double a = g.data_as<float>()[j], b = w.data_as<float>()[j];
        const double d = std::isnan(a) != std::isnan(b) ? std::numeric_limits<double>::infinity()
                         : std::isnan(a)                ? 0.0
                                                        : std::fabs(a - b);
        se += d * d, sr += std::isnan(b) ? 0 : b * b;
        m = std::max(m, d), ref_max = std::max(ref_max, std::isnan(b) ? 0 : std::fabs(b));
      }
      const double r = sr > 0 ? std::sqrt(se / sr) : std::sqrt(se), lim = tol.of_ref_max ? tol.max_abs * ref_max
                                                                                          : tol.max_abs;
      v.pass = v.pass && r <= tol.rel_rms && m <= lim;
      rel = std::max(rel, r), mx = std::max(mx, m), bound = std::max(bound, lim);
    }
    std::snprintf(buf, sizeof buf, "rel-RMS %.3g (<= %.0e), max-abs %.3g (<= %.3g)", rel, tol.rel_rms, mx, bound);
  }
  v.metric = buf;
  return v;
}

/// The outputs of a case that has run, as contiguous host tensors (waits for the device).
std::vector<Tensor> outputs_on_host(Backend& be, const OpCase& c) {
  std::vector<Tensor> h;
  for (const Tensor& t : c.outputs) h.push_back(to_host(be, t).clone());
  return h;
}

TEST_F(CudaBackendOpsTest, EveryOpMatchesTheCpuWithinItsTolerance) {
  const std::vector<OpEntry> table = test::backend_op_table();
  std::printf("%-16s %-56s %-62s %s\n", "op", "shape", "metric", "result");
  int failed = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const OpEntry& e = table[i];
    const uint64_t seed = 1000 + i;
    OpCase c = e.make(*cpu_, seed);
    c.run();
    const std::vector<Tensor> want = outputs_on_host(*cpu_, c);
    OpCase g = e.make(*gpu_, seed);
    g.run();
    const std::vector<Tensor> got = outputs_on_host(*gpu_, g);
    ASSERT_EQ(got.size(), want.size()) << e.op;
    const Verdict v = judge(e.tol, got, want);
    std::printf("%-16s %-56s %-62s %s\n", e.op.c_str(), e.shape.c_str(), v.metric.c_str(), v.pass ? "PASS" : "FAIL");
    std::fflush(stdout);
    EXPECT_TRUE(v.pass) << e.op << " [" << e.shape << "]: " << v.metric;
    failed += !v.pass;
  }
  std::printf("%zu entries, %d failed\n", table.size(), failed);
}

/// Median of 10 event-timed runs of f on the backend's stream after 2 warm-ups, in ms.
template <typename F>
double median_ms(Backend& b, F&& f) {
  return cuda_median_ms(cuda_stream_of(b), f, 10, 2);
}

TEST_F(CudaBackendOpsTest, PerfOfEveryOpAgainstMeasuredCeilings) {
  const char* env = std::getenv("MAGI2_OPS_PERF");
  if (env == nullptr || std::string(env) != "1") GTEST_SKIP() << "set MAGI2_OPS_PERF=1 to time the op table";
  // Bandwidth ceiling: a 1 GiB device-to-device copy (bytes read + written).
  double gbs_ceiling = 0, tflops_ceiling = 0;
  {
    Tensor src = gpu_->alloc({16384, 32768}, DType::BF16), dst = gpu_->alloc({16384, 32768}, DType::BF16);
    gpu_->zero(src);
    const double ms = median_ms(*gpu_, [&] { gpu_->copy({.src = src, .dst = dst}); });
    gbs_ceiling = 2.0 * static_cast<double>(src.nbytes()) / ms * 1e-6;
  }
  {  // FLOP/s ceiling: the bf16 cuBLASLt linear at 8192^3.
    test::CaseBuilder b(*gpu_, 1);
    Tensor x = b.in(b.uniform({8192, 8192}, DType::BF16, -1.f, 1.f));
    Tensor w = b.in(b.uniform({8192, 8192}, DType::BF16, -0.02f, 0.02f));
    Tensor y = gpu_->alloc({8192, 8192}, DType::BF16);
    const double ms = median_ms(*gpu_, [&] { gpu_->linear({.x = x, .w = w, .y = y, .groups = Groups::single(8192)}); });
    tflops_ceiling = 2.0 * 8192.0 * 8192.0 * 8192.0 / ms * 1e-9;
  }
  std::printf("ceilings: device-to-device copy %.0f GB/s, bf16 linear 8192^3 %.1f TFLOP/s\n", gbs_ceiling,
              tflops_ceiling);
  std::printf("%-16s %-56s %10s %14s %9s\n", "op", "shape", "ms", "rate", "ceiling");
  const std::vector<OpEntry> table = test::backend_op_table();
  for (size_t i = 0; i < table.size(); ++i) {
    const OpEntry& e = table[i];
    OpCase g = e.make(*gpu_, 1000 + i);
    const double ms = median_ms(*gpu_, g.run);
    char rate[40];
    double frac = 0;
    if (e.flops > 0) {
      const double tf = e.flops / ms * 1e-9;
      std::snprintf(rate, sizeof rate, "%.1f TFLOP/s", tf);
      frac = tf / tflops_ceiling;
    } else {
      const double gbs = g.bytes / ms * 1e-6;
      std::snprintf(rate, sizeof rate, "%.0f GB/s", gbs);
      frac = gbs / gbs_ceiling;
    }
    std::printf("%-16s %-56s %10.4f %14s %8.1f%%\n", e.op.c_str(), e.shape.c_str(), ms, rate, 100 * frac);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace magi2
