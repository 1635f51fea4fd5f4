#pragma once

#include "framework/ops/cpu/Simd.h"
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

// sum(g) and dotDeviation(g, x, mean) in one pass, the same bits as the two, with g taken
// as 0 where a ReLU mask (simd::positiveBits words; null: no mask) has its bit clear. On
// AVX-512 the 16 lanes are one register each and the mask applies in registers; the two
// lane chains interleave, so the pass is not bound by one chain's add latency.
inline void sumAndDotDeviation(const float* g, const uint16_t* bits, const float* x, float mean, int64_t n, float& sumG,
                               float& sumGX) {
#if defined(APS_SIMD_AVX512)
  static_assert(kernels::kLanes == 16);
  __m512 accG = _mm512_setzero_ps(), accGX = _mm512_setzero_ps();
  const __m512 m = _mm512_set1_ps(mean);
  int64_t w = 0;
  for (; 16 * w + 16 <= n; ++w) {
    const __m512 gv =
        bits != nullptr ? _mm512_maskz_mov_ps(bits[w], _mm512_loadu_ps(g + 16 * w)) : _mm512_loadu_ps(g + 16 * w);
    accG = _mm512_add_ps(accG, gv);
    accGX = _mm512_fmadd_ps(gv, _mm512_sub_ps(_mm512_loadu_ps(x + 16 * w), m), accGX);
  }
  if (16 * w < n) {  // the tail's lanes step once, the others keep their sums
    const auto tail = static_cast<__mmask16>((1u << (n - 16 * w)) - 1u);
    const __m512 gv = _mm512_maskz_loadu_ps(bits != nullptr ? tail & bits[w] : tail, g + 16 * w);
    const __m512 xv = _mm512_maskz_loadu_ps(tail, x + 16 * w);
    accG = _mm512_mask_add_ps(accG, tail, accG, gv);
    accGX = _mm512_mask3_fmadd_ps(gv, _mm512_sub_ps(xv, m), accGX, tail);
  }
  alignas(64) float lanes[kernels::kLanes];
  _mm512_store_ps(lanes, accG);
  kernels::combineLanes(lanes);
  sumG = lanes[0];
  _mm512_store_ps(lanes, accGX);
  kernels::combineLanes(lanes);
  sumGX = lanes[0];
#else
  auto masked = [g, bits](int64_t i) { return bits == nullptr || simd::positiveBit(bits, i) ? g[i] : 0.0f; };
  sumG = laneSum(n, [&](float acc, int64_t i) { return acc + masked(i); });
  sumGX = laneSum(n, [&](float acc, int64_t i) { return kernels::addGradDeviation(acc, masked(i), x[i], mean); });
#endif
}

}  // namespace aps::cpu::detail
