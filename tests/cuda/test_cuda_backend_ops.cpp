// One op test table for every backend (issue 9 item 6, in the spirit of
// llama.cpp's test-backend-ops): each entry of tests/cuda/ops_table*.cpp runs on
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
#include "ops/fp8_blocks.h"
#include "ops/numerics.h"
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

// Every producer's FP8 rows on the device (the table's "+ FP8 rows" entries:
// outputs y, q, scale) are the activation rule applied to the bf16 y that
// producer wrote, byte for byte, whatever its CPU parity tolerance.
TEST_F(CudaBackendOpsTest, EveryProducersFp8RowsQuantiseItsOwnOutput) {
  const std::vector<OpEntry> table = test::backend_op_table();
  int checked = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const OpEntry& e = table[i];
    if (e.shape.find("+ FP8 rows") == std::string::npos) continue;
    OpCase g = e.make(*gpu_, 1000 + i);
    g.run();
    const std::vector<Tensor> out = outputs_on_host(*gpu_, g);
    ASSERT_EQ(out.size(), 3u) << e.op << " [" << e.shape << "]";
    const Tensor& q = out[1];
    const Tensor& sc = out[2];
    const int64_t rows = q.size(0), cols = q.size(1);
    const Tensor y = out[0].reshape({rows, cols});
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < cols / kFp8ActGroup; ++b) {
        const uint16_t* yr = y.data_as<uint16_t>() + r * cols + b * kFp8ActGroup;
        float amax = 0.f;
        for (int64_t k = 0; k < kFp8ActGroup; ++k) amax = fp8_amax_step(amax, bf16_bits_to_f32(yr[k]));
        const float s = fp8_act_scale(amax);
        bad += sc.data_as<float>()[r * (cols / kFp8ActGroup) + b] != s;
        for (int64_t k = 0; k < kFp8ActGroup; ++k)
          bad += q.data_as<uint8_t>()[r * cols + b * kFp8ActGroup + k] != fp8_act_quant(bf16_bits_to_f32(yr[k]), s);
      }
    EXPECT_EQ(bad, 0) << e.op << " [" << e.shape << "]";
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

// The FP8 linear with its input's FP8 rows from rms_norm (LinearParams::x8)
// gives the bytes of the same linear quantising x itself, on one and on three
// row groups (cuBLASLt: the producer's scales regrouped per group).
TEST_F(CudaBackendOpsTest, Fp8LinearWithProducerRowsMatchesItsOwnQuantiser) {
  const int64_t t = 1000, in = 3072, out = 1024;
  test::CaseBuilder b(*gpu_, 7);
  Tensor x0 = b.in(b.uniform({t, in}, DType::BF16, -3.f, 3.f));
  Tensor nw = b.in(b.uniform({3 * in}, DType::F32, -0.17f, 0.17f));
  Groups g3;
  g3.cu = {0, 400, 900, t};
  g3.count = 3;
  Tensor x = gpu_->alloc({t, in}, DType::BF16);
  const Fp8Rows x8{gpu_->alloc({t, in}, DType::F8E4M3), gpu_->alloc({t, in / kFp8ActGroup}, DType::F32)};
  gpu_->rms_norm({.x = x0, .w = nw, .y = x, .groups = g3, .y8 = x8});
  for (const Groups& g : {Groups::single(t), g3}) {
    const Tensor w = b.uniform({g.count, out, in}, DType::BF16, -0.035f, 0.035f);
    const Fp8Blocks q = quantize_fp8_blocks(w, "linear.w");
    const Tensor wq = b.in(q.q.reshape({g.count * out, in})), ws = b.in(q.scale_inv);
    Tensor y_own = gpu_->alloc({t, out}, DType::BF16), y_x8 = gpu_->alloc({t, out}, DType::BF16);
    gpu_->linear({.x = x, .w = wq, .y = y_own, .groups = g, .w_scale = ws});
    gpu_->linear({.x = x, .w = wq, .y = y_x8, .groups = g, .w_scale = ws, .x8 = x8});
    EXPECT_EQ(test::differing_elements(to_host(*gpu_, y_x8).clone(), to_host(*gpu_, y_own).clone()), 0)
        << g.count << " row group(s)";
  }
  // A mismatched x8 is refused with one error naming it.
  const Fp8Rows bad{x8.q.slice_rows(0, t / 2), x8.scale};
  EXPECT_TRUE(test::throws_with(
      [&] {
        Tensor y = gpu_->alloc({t, out}, DType::BF16);
        const Tensor w = b.uniform({1, out, in}, DType::BF16, -0.035f, 0.035f);
        const Fp8Blocks q = quantize_fp8_blocks(w, "linear.w");
        gpu_->linear({.x = x, .w = b.in(q.q.reshape({out, in})), .y = y, .groups = Groups::single(t),
                      .w_scale = b.in(q.scale_inv), .x8 = bad});
      },
      {"linear.x8"}));
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
