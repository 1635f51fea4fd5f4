#pragma once

#include <cstdint>

namespace aps::cpu::detail {

// Fixed-order reductions over a contiguous run of floats: 16 independent float lanes
// (two AVX registers once vectorised), combined pairwise in a fixed order, so the result
// depends only on the values and their count, never on alignment or thread count.
template <typename Term>
inline float laneSum(int64_t n, const Term& term) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += term(i + j);
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += term(i);
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  }
  return acc[0];
}

inline float sum(const float* x, int64_t n) {
  return laneSum(n, [x](int64_t i) { return x[i]; });
}

inline float dot(const float* x, const float* y, int64_t n) {
  return laneSum(n, [x, y](int64_t i) { return x[i] * y[i]; });
}

// sum (x - mean)^2
inline float sumSquaredDeviation(const float* x, float mean, int64_t n) {
  return laneSum(n, [x, mean](int64_t i) {
    const float d = x[i] - mean;
    return d * d;
  });
}

// sum g * (x - mean)
inline float dotDeviation(const float* g, const float* x, float mean, int64_t n) {
  return laneSum(n, [g, x, mean](int64_t i) { return g[i] * (x[i] - mean); });
}

}  // namespace aps::cpu::detail
