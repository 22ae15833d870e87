// Timing helpers shared by the `magi2 bench` stages: wall-clock milliseconds
// and the median of repeated measurements.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
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

/// The non-empty items of a comma-separated list, in order ("272p,,540p" ->
/// {"272p", "540p"}): `--resolutions` of every bench stage.
inline std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos <= list.size();) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    if (comma > pos) out.push_back(list.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

}  // namespace magi2::cli
