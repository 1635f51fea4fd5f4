#pragma once

#include "framework/ops/kernels/Reduce.h"

#include <cstdint>

namespace aps::cpu::detail {

// Fixed-order reductions over a contiguous run of floats: 16 independent float lanes
// (two AVX registers once vectorised), combined pairwise in a fixed order, so the result
// depends only on the values and their count, never on alignment or thread count. The
// order is kernels/Reduce.h's, which the CUDA kernels follow with one thread per lane.
// step(acc, i) returns lane acc after adding element i's term.
template <typename Step>
inline float laneSum(int64_t n, const Step& step) {
  constexpr int kLanes = kernels::kLanes;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] = step(acc[j], i + j);
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] = step(acc[j], i);
  kernels::combineLanes(acc);
  return acc[0];
}

inline float sum(const float* x, int64_t n) {
  return laneSum(n, [x](float acc, int64_t i) { return acc + x[i]; });
}

inline float dot(const float* x, const float* y, int64_t n) {
  return laneSum(n, [x, y](float acc, int64_t i) { return acc + x[i] * y[i]; });
}

// sum (x - mean)^2
inline float sumSquaredDeviation(const float* x, float mean, int64_t n) {
  return laneSum(n, [x, mean](float acc, int64_t i) { return kernels::addSquaredDeviation(acc, x[i], mean); });
}

// sum g * (x - mean)
inline float dotDeviation(const float* g, const float* x, float mean, int64_t n) {
  return laneSum(n, [g, x, mean](float acc, int64_t i) { return kernels::addGradDeviation(acc, g[i], x[i], mean); });
}

}  // namespace aps::cpu::detail
