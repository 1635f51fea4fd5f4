#pragma once

// The float vector the convolution micro-kernels are written in: 16 lanes of AVX-512, 8 of
// AVX2 + FMA, or 8 plain floats elsewhere (chosen at compile time; the build targets the
// host CPU). Every lane is its own multiply-add chain, so a kernel's result does not depend
// on the width, only on the order in which it feeds the lanes (and, on the plain fallback,
// on the multiply and the add rounding separately where the vector paths fuse them).

#if defined(__AVX512F__)
#include <immintrin.h>
#define APS_SIMD_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define APS_SIMD_AVX2 1
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace aps::cpu::detail::simd {

#if defined(APS_SIMD_AVX512)
constexpr int kLanes = 16;
constexpr int kRegisters = 32;
using Vec = __m512;
inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec broadcast(const float* p) { return _mm512_set1_ps(*p); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
inline Vec splat(float x) { return _mm512_set1_ps(x); }
#elif defined(APS_SIMD_AVX2)
constexpr int kLanes = 8;
constexpr int kRegisters = 16;
using Vec = __m256;
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec broadcast(const float* p) { return _mm256_broadcast_ss(p); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
inline Vec splat(float x) { return _mm256_set1_ps(x); }
#else
constexpr int kLanes = 8;
constexpr int kRegisters = 16;
struct Vec {
  float v[kLanes];
};
inline Vec zero() { return Vec{}; }
inline Vec load(const float* p) {
  Vec r;
  for (int i = 0; i < kLanes; ++i) r.v[i] = p[i];
  return r;
}
inline void store(float* p, Vec v) {
  for (int i = 0; i < kLanes; ++i) p[i] = v.v[i];
}
inline Vec broadcast(const float* p) {
  Vec r;
  for (float& x : r.v) x = *p;
  return r;
}
// Fused as the AVX paths' instructions, so every build computes the same bits (without FMA
// instructions std::fma is the C library's: slower, exact).
inline Vec fma(Vec a, Vec b, Vec c) {
  for (int i = 0; i < kLanes; ++i) c.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
  return c;
}
inline Vec add(Vec a, Vec b) {
  for (int i = 0; i < kLanes; ++i) a.v[i] += b.v[i];
  return a;
}
inline Vec sub(Vec a, Vec b) {
  for (int i = 0; i < kLanes; ++i) a.v[i] -= b.v[i];
  return a;
}
inline Vec splat(float x) { return broadcast(&x); }
#endif

#if defined(APS_SIMD_AVX2)
// Loaded from kTailMask + 8 - n: a mask of the first n lanes (0 <= n <= 8).
alignas(32) inline constexpr int32_t kTailMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
#endif

// dst[0, n) <- src[0, n), and dst[0, n) <- 0: whole vectors, then the rest under a mask, with
// no call (for the rows of a few dozen floats the convolutions pad, a memcpy or memset call
// costs more than the copy).
inline void copy(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
#if defined(APS_SIMD_AVX512) || defined(APS_SIMD_AVX2)
  for (; i + kLanes <= n; i += kLanes) store(dst + i, load(src + i));
#endif
#if defined(APS_SIMD_AVX512)
  if (i < n) {
    const auto mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(dst + i, mask, _mm512_maskz_loadu_ps(mask, src + i));
  }
#elif defined(APS_SIMD_AVX2)
  if (i < n) {
    const __m256i mask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMask + 8 - (n - i)));
    _mm256_maskstore_ps(dst + i, mask, _mm256_maskload_ps(src + i, mask));
  }
#else
  for (; i < n; ++i) dst[i] = src[i];
#endif
}
inline void fillZero(float* dst, int64_t n) {
  int64_t i = 0;
#if defined(APS_SIMD_AVX512) || defined(APS_SIMD_AVX2)
  for (; i + kLanes <= n; i += kLanes) store(dst + i, zero());
#endif
#if defined(APS_SIMD_AVX512)
  if (i < n) _mm512_mask_storeu_ps(dst + i, static_cast<__mmask16>((1u << (n - i)) - 1u), zero());
#elif defined(APS_SIMD_AVX2)
  if (i < n) {
    _mm256_maskstore_ps(dst + i, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMask + 8 - (n - i))), zero());
  }
#else
  for (; i < n; ++i) dst[i] = 0.0f;
#endif
}

// Lane j <- row[start + j] where 0 <= start + j < n, else 0 (start may be negative): the
// lanes outside the row are not read.
inline Vec loadRange(const float* row, int64_t start, int64_t n) {
  const int64_t lo = std::max<int64_t>(0, -start), hi = std::min<int64_t>(kLanes, n - start);
  if (lo == 0 && hi == kLanes) return load(row + start);
  if (hi <= lo) return zero();
#if defined(APS_SIMD_AVX512)
  const auto mask = static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
  // The address of lane 0 as an integer: it may lie before the row, and is never read.
  const auto* base = reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(row) + start * 4);
  return _mm512_maskz_loadu_ps(mask, base);
#else
  alignas(64) float lanes[kLanes] = {};
  for (int64_t j = lo; j < hi; ++j) lanes[j] = row[start + j];
  return load(lanes);
#endif
}

// even <- lo[0], lo[2], ..., hi[0], hi[2], ...; odd <- lo[1], lo[3], ..., hi[1], ...: 2 kLanes
// floats split by parity.
inline void deinterleave(Vec lo, Vec hi, Vec& even, Vec& odd) {
#if defined(APS_SIMD_AVX512)
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  even = _mm512_permutex2var_ps(lo, evens, hi);
  odd = _mm512_permutex2var_ps(lo, odds, hi);
#elif defined(APS_SIMD_AVX2)
  // Per 128-bit half: lo's then hi's pairs; the 64-bit permute puts the halves in order.
  const Vec e = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
  const Vec o = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
  even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
  odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
#else
  for (int i = 0; i < kLanes / 2; ++i) {
    even.v[i] = lo.v[2 * i];
    odd.v[i] = lo.v[2 * i + 1];
    even.v[kLanes / 2 + i] = hi.v[2 * i];
    odd.v[kLanes / 2 + i] = hi.v[2 * i + 1];
  }
#endif
}

#if defined(APS_SIMD_AVX512)
// (lo, hi) <- a[0], b[0], a[1], b[1], ...: the inverse of deinterleave.
inline void zip(Vec a, Vec b, Vec& lo, Vec& hi) {
  const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  lo = _mm512_permutex2var_ps(a, low, b);
  hi = _mm512_permutex2var_ps(a, high, b);
}
#endif

// dst[0, n) <- the first n of a[0], b[0], a[1], b[1], ... (n <= 2 kLanes).
inline void interleave(float* dst, Vec a, Vec b, int64_t n) {
#if defined(APS_SIMD_AVX512)
  Vec lo, hi;
  zip(a, b, lo, hi);
  if (n >= 2 * kLanes) {
    store(dst, lo);
    store(dst + kLanes, hi);
  } else if (n >= kLanes) {
    store(dst, lo);
    _mm512_mask_storeu_ps(dst + kLanes, static_cast<__mmask16>((1u << (n - kLanes)) - 1u), hi);
  } else {
    _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << n) - 1u), lo);
  }
#else
  alignas(64) float buffer[2 * kLanes];
  alignas(64) float x[kLanes], y[kLanes];
  store(x, a);
  store(y, b);
  for (int i = 0; i < kLanes; ++i) {
    buffer[2 * i] = x[i];
    buffer[2 * i + 1] = y[i];
  }
  copy(dst, buffer, n);
#endif
}

// dst[i * ldDst + j] = src[j * ldSrc + i] for i, j < 8: an 8x8 block transposed, in
// registers where AVX is available.
inline void transpose8x8(float* dst, int64_t ldDst, const float* src, int64_t ldSrc) {
#if defined(APS_SIMD_AVX512) || defined(APS_SIMD_AVX2)
  __m256 r[8], t[8];
  for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(src + j * ldSrc);
  for (int j = 0; j < 8; j += 2) {
    t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
    t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
  }
  for (int j = 0; j < 8; j += 4) {
    r[j] = _mm256_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_ps(dst + j * ldDst, _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
    _mm256_storeu_ps(dst + (j + 4) * ldDst, _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
  }
#else
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) dst[i * ldDst + j] = src[j * ldSrc + i];
  }
#endif
}

// A ReLU mask packed 16 floats to a word: bit j of bits[w] <- x[16 w + j] > 0 for the n
// floats (the bits past n are 0). ceil(n / 16) words.
inline void positiveBits(uint16_t* bits, const float* x, int64_t n) {
  int64_t w = 0;
#if defined(APS_SIMD_AVX512)
  for (; 16 * w + 16 <= n; ++w) {
    bits[w] = static_cast<uint16_t>(_mm512_cmp_ps_mask(_mm512_loadu_ps(x + 16 * w), zero(), _CMP_GT_OQ));
  }
  if (16 * w < n) {
    const auto tail = static_cast<__mmask16>((1u << (n - 16 * w)) - 1u);
    bits[w] = static_cast<uint16_t>(_mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(tail, x + 16 * w), zero(), _CMP_GT_OQ));
  }
#else
#if defined(APS_SIMD_AVX2)
  for (; 16 * w + 16 <= n; ++w) {
    const int lo = _mm256_movemask_ps(_mm256_cmp_ps(load(x + 16 * w), zero(), _CMP_GT_OQ));
    const int hi = _mm256_movemask_ps(_mm256_cmp_ps(load(x + 16 * w + 8), zero(), _CMP_GT_OQ));
    bits[w] = static_cast<uint16_t>(lo | (hi << 8));
  }
#endif
  for (; 16 * w < n; ++w) {
    unsigned word = 0;
    for (int64_t j = 0; j < 16 && 16 * w + j < n; ++j) word |= (x[16 * w + j] > 0.0f ? 1u : 0u) << j;
    bits[w] = static_cast<uint16_t>(word);
  }
#endif
}

// Bit i of positiveBits' words: whether float i was > 0.
inline bool positiveBit(const uint16_t* bits, int64_t i) { return ((bits[i / 16] >> (i % 16)) & 1u) != 0; }

}  // namespace aps::cpu::detail::simd
