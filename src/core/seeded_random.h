// Seeded, portable random values for the built-in tiny models (DiT, text
// encoder, codecs): element i of a tensor depends only on (name, seed, i),
// identical on every machine (own SplitMix64 + Box-Muller, no std
// distributions, which differ between standard libraries).
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

namespace magi2 {

/// FNV-1a 64: a fixed, portable string hash (std::hash differs between libraries).
inline uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

/// SplitMix64 output for counter i of stream `key`.
inline uint64_t splitmix(uint64_t key, uint64_t i) {
  uint64_t z = key + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Uniform in (0, 1]: 53 random bits, never 0 (log in Box-Muller).
inline double unit_uniform(uint64_t key, uint64_t i) {
  return static_cast<double>((splitmix(key, i) >> 11) + 1) * 0x1.0p-53;
}

/// Normal(mean, sd) for element i: Box-Muller on counter pairs (2k, 2k+1),
/// element 2k takes the cosine branch, 2k+1 the sine branch, so each element
/// is a pure function of i.
inline double normal_sample(uint64_t key, uint64_t i, double mean, double sd) {
  const uint64_t k = i & ~uint64_t{1};
  const double rad = std::sqrt(-2.0 * std::log(unit_uniform(key, k)));
  const double ang = 2.0 * std::numbers::pi * unit_uniform(key, k + 1);
  return mean + sd * rad * ((i & 1) ? std::sin(ang) : std::cos(ang));
}

}  // namespace magi2
