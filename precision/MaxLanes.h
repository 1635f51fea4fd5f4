#pragma once

// The largest of sixteen unsigned 32-bit lanes, for the AVX-512 paths that take a maximum of
// |bits| (maxAbsBits, Dettmers' block scales).

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

}  // namespace aps::precision
#endif
