// Timing helpers shared by the `magi2 bench` stages: wall-clock milliseconds
// and the median of repeated measurements.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace magi2::cli {

using bench_clock = std::chrono::steady_clock;

/// Milliseconds from `t` to now (steady clock).
inline double ms_since(bench_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(bench_clock::now() - t).count();
}

/// Median of `v` (the mean of the middle two for an even count; 0 when empty).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

}  // namespace magi2::cli
