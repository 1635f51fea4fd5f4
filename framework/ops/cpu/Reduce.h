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

#if defined(APS_SIMD_AVX512)
// combineLanes on a register's 16 lanes: the same pairwise additions (j + j+8, j + j+4,
// j + j+2, 0 + 1), by halves of the register instead of through memory.
inline float combineLanes(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// laneSum with the 16 lanes in one register: step(acc, values, lanes) returns acc with the
// lanes in `lanes` stepped by `values` (loaded with the other lanes zero) and the others kept.
template <typename Step>
inline float laneSum512(const float* x, int64_t n, const Step& step) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = step(acc, _mm512_loadu_ps(x + i), static_cast<__mmask16>(0xffff));
  if (i < n) {
    const auto tail = static_cast<__mmask16>((1u << (n - i)) - 1u);
    acc = step(acc, _mm512_maskz_loadu_ps(tail, x + i), tail);
  }
  return combineLanes(acc);
}
#endif

inline float sum(const float* x, int64_t n) {
#if defined(APS_SIMD_AVX512)
  return laneSum512(x, n, [](__m512 acc, __m512 v, __mmask16 lanes) { return _mm512_mask_add_ps(acc, lanes, acc, v); });
#else
  return laneSum(n, [x](float acc, int64_t i) { return acc + x[i]; });
#endif
}

inline float dot(const float* x, const float* y, int64_t n) {
  return laneSum(n, [x, y](float acc, int64_t i) { return acc + x[i] * y[i]; });
}

// sum (x - mean)^2: one fused multiply-add a step (kernels::addSquaredDeviation), on AVX-512
// in registers.
inline float sumSquaredDeviation(const float* x, float mean, int64_t n) {
#if defined(APS_SIMD_AVX512)
  const __m512 m = _mm512_set1_ps(mean);
  return laneSum512(x, n, [m](__m512 acc, __m512 v, __mmask16 lanes) {
    const __m512 d = _mm512_sub_ps(v, m);
    return _mm512_mask3_fmadd_ps(d, d, acc, lanes);
  });
#else
  return laneSum(n, [x, mean](float acc, int64_t i) { return kernels::addSquaredDeviation(acc, x[i], mean); });
#endif
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
  sumG = combineLanes(accG);
  sumGX = combineLanes(accGX);
#else
  auto masked = [g, bits](int64_t i) { return bits == nullptr || simd::positiveBit(bits, i) ? g[i] : 0.0f; };
  sumG = laneSum(n, [&](float acc, int64_t i) { return acc + masked(i); });
  sumGX = laneSum(n, [&](float acc, int64_t i) { return kernels::addGradDeviation(acc, masked(i), x[i], mean); });
#endif
}

}  // namespace aps::cpu::detail
