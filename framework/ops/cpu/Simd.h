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
#elif defined(APS_SIMD_AVX2)
constexpr int kLanes = 8;
constexpr int kRegisters = 16;
using Vec = __m256;
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec broadcast(const float* p) { return _mm256_broadcast_ss(p); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
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
inline Vec fma(Vec a, Vec b, Vec c) {
  for (int i = 0; i < kLanes; ++i) c.v[i] += a.v[i] * b.v[i];
  return c;
}
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

}  // namespace aps::cpu::detail::simd
