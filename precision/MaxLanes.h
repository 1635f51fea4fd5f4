#pragma once

// The largest |bits| of floats in AVX-512 lanes (maxAbsBits, Dettmers' block scales).

#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>

namespace aps::precision {

// Halves folded in registers. The unmasked intrinsics (and GCC 12's own
// _mm512_reduce_max_epu32) start from _mm512_undefined, which GCC 12 reports as read
// uninitialised once inlined; the maskz forms with every lane on are the same instructions.
// Through memory and a scalar loop, a short block (Dettmers' 100 values) spent as long on this
// as on its loads.
inline uint32_t maxLane(__m512i acc) {
  const auto fold = [&acc](__m512i other) { acc = _mm512_maskz_max_epu32(0xffff, acc, other); };
  fold(_mm512_maskz_shuffle_i64x2(0xff, acc, acc, 0x4e));
  fold(_mm512_maskz_shuffle_i64x2(0xff, acc, acc, 0xb1));
  fold(_mm512_maskz_shuffle_epi32(0xffff, acc, _MM_PERM_BADC));
  fold(_mm512_maskz_shuffle_epi32(0xffff, acc, _MM_PERM_CDAB));
  return static_cast<uint32_t>(_mm512_cvtsi512_si32(acc));
}

// |bits| of each lane (the sign cleared): non-negative floats order like these integers.
inline __m512i absBitsLanes(__m512i bits) { return _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)); }

// maxAbsBits (precision/ApsScaler.h) in lanes, inline for short blocks (Dettmers' groups):
// whole steps with plain loads, then one masked step (masked loads in every step are slow on
// AMD Zen 4).
inline uint32_t maxAbsBitsLanes(const float* x, int64_t n) {
  __m512i acc = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_max_epu32(acc, absBitsLanes(_mm512_loadu_si512(x + i)));
  if (i < n) {
    const auto lanes = static_cast<__mmask16>((1u << (n - i)) - 1);
    acc = _mm512_max_epu32(acc, absBitsLanes(_mm512_maskz_loadu_epi32(lanes, x + i)));
  }
  return maxLane(acc);
}

}  // namespace aps::precision
#endif
