#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace aps::testsupport {

// `size` normal samples N(mean, stddev^2) from a fixed seed: the same inputs on every machine
// and backend, for kernel tests that compare runs.
inline std::vector<float> randomVector(size_t size, uint32_t seed, float stddev = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, stddev);
  std::vector<float> v(size);
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace aps::testsupport
