// Shared by the CPU op tests: float64 reference helpers (bf16 rounding by
// nearbyint, ulp measures, seeded inputs, backend factories, error checks).
// Test-only; an anonymous namespace gives each test binary its own copy.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/ops.h"
#include "util/testing.h"
#include <algorithm>
#include <numeric>

namespace magi2 {
namespace {

/// A host i32 index tensor from a vector (gather_rows' index, rope's src_rows, cu_seqlens).
inline Tensor i32(const std::vector<int32_t>& v) { return Tensor::from_i32({static_cast<int64_t>(v.size())}, v); }


constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Rng = std::mt19937;

// ---- shared test helpers (duplicated in the other test_ops_cpu_*.cpp) ------

// The group of `g` that row r falls in, or -1 beyond the last.
inline int group_of_row(const Groups& g, int64_t r) {
  for (int m = 0; m < g.count; ++m)
    if (r >= g.cu[m] && r < g.cu[m + 1]) return m;
  return -1;
}

double bf16_ref(double x) {
  if (!std::isfinite(x) || x == 0) return x;
  const int e = std::max(std::ilogb(x), -126);
  const double q = std::ldexp(1.0, e - 7);
  const double r = std::nearbyint(x / q) * q;  // default mode: ties to even
  return std::fabs(r) >= std::ldexp(1.0, 128) ? std::copysign(kInf, x) : r;
}
double ulp_ref(double x) {
  const int e = (x == 0 || !std::isfinite(x)) ? -126 : std::max(std::ilogb(x), -126);
  return std::ldexp(1.0, e - 7);
}
[[maybe_unused]] double sigmoid_ref(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// Element (r, c) of a 2-D row-strided or (flat) contiguous tensor as float64.
double at(const Tensor& t, int64_t r, int64_t c) {
  const int64_t i = r * t.row_stride() + c;
  return t.dtype() == DType::F32 ? t.data_as<float>()[i] : bf16_bits_to_f32(t.data_as<uint16_t>()[i]);
}
[[maybe_unused]] double at(const Tensor& t, int64_t i) { return at(t.reshape({t.numel()}), 0, i); }
void put(const Tensor& t, int64_t r, int64_t c, double v) {
  const int64_t i = r * t.row_stride() + c;
  if (t.dtype() == DType::F32) t.data_as<float>()[i] = static_cast<float>(v);
  else t.data_as<uint16_t>()[i] = f32_to_bf16_bits(static_cast<float>(v));
}
Tensor rand_t(const Shape& s, DType dt, Rng& g, double lo, double hi) {
  Tensor t = Tensor::zeros(s, dt);
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor f = t.reshape({t.numel()});
  for (int64_t i = 0; i < t.numel(); ++i) put(f, 0, i, u(g));
  return t;
}

// bf16 outputs: |out - ref| <= limit ulp(ref) + slack; NaN must match NaN.
struct UlpCheck {
  std::string what;
  double limit;
  double max_ulp = 0;
  int64_t n = 0, exact = 0, bad = 0;
  void add(double out, double ref, double slack = 0, const std::string& where = "") {
    ++n;
    const double rr = bf16_ref(ref);
    if (std::isnan(ref) || std::isnan(out) || std::isinf(ref) || std::isinf(out)) {
      const bool ok = std::isnan(ref) ? std::isnan(out) : (out == ref || out == rr);
      exact += ok;
      if (!ok && bad++ < 5) ADD_FAILURE() << what << where << ": got " << out << ", want " << ref;
      if (!ok) max_ulp = kInf;
      return;
    }
    exact += out == rr;
    const double err = std::fabs(out - ref);
    max_ulp = std::max(max_ulp, err / ulp_ref(ref));
    if (err > limit * ulp_ref(ref) + slack && bad++ < 5)
      ADD_FAILURE() << what << where << ": got " << out << ", ref " << ref << " (" << err / ulp_ref(ref)
                    << " ulp, slack " << slack << ")";
  }
  // Most outputs must be exactly bf16(ref); one-rounding ops reach 100 %.
  void done(double min_exact_frac) const {
    std::printf("[ %-28s] max %.3f ulp (limit %g), exact bf16(ref) %lld/%lld\n", what.c_str(), max_ulp, limit,
                static_cast<long long>(exact), static_cast<long long>(n));
    EXPECT_GT(n, 0);
    EXPECT_GE(static_cast<double>(exact), min_exact_frac * static_cast<double>(n)) << what;
  }
};

// fp32 outputs: |out - ref| <= tol * scale (scale >= |ref|, e.g. sum|terms|).
struct RelCheck {
  std::string what;
  double tol;
  double max_rel = 0;
  int64_t n = 0, bad = 0;
  void add(double out, double ref, double scale, const std::string& where = "") {
    ++n;
    const double rel = std::fabs(out - ref) / std::max(scale, 1e-300);
    max_rel = std::max(max_rel, std::isnan(rel) ? kInf : rel);
    if (!(rel <= tol) && bad++ < 5) ADD_FAILURE() << what << where << ": got " << out << ", ref " << ref;
  }
  void done() const {
    std::printf("[ %-28s] max rel %.3g (limit %.0e)\n", what.c_str(), max_rel, tol);
    EXPECT_GT(n, 0);
  }
};

// Runs `run` on fresh 1- and 2-thread backends and expects bit-identical
// outputs (contiguous tensors); returns the 2-thread outputs. Each backend is
// made right before its run because its constructor sets the process-wide
// OpenMP thread count (a later backend changes an earlier one's count).
template <typename F>
std::vector<Tensor> thread_invariant(F&& run) {
  std::vector<Tensor> one, two;
  {
    auto be = make_cpu_backend(1);
    EXPECT_EQ(omp_get_max_threads(), 1);
    one = run(*be);
  }
  {
    auto be = make_cpu_backend(2);
    EXPECT_EQ(omp_get_max_threads(), 2);
    two = run(*be);
  }
  EXPECT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size() && i < two.size(); ++i)
    EXPECT_EQ(std::memcmp(one[i].data(), two[i].data(), one[i].nbytes()), 0)
        << "output " << i << " differs between 1 and 2 threads";
  return two;
}

using test::throws_with;

}  // namespace
}  // namespace magi2
