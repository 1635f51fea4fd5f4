#include "precision/Quantizer.h"

#include "precision/kernels/FloatRounding.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/core/Rng.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace aps::precision {

namespace {

constexpr int64_t kChunk = 512;  // random bits are drawn per chunk of this many values

// The rounding core for one value is kernels::roundOne (precision/kernels/FloatRounding.h,
// shared with the CUDA codecs); it is the reference for the AVX2 kernel below and runs alone
// for tails, scalar calls and builds without AVX2.
using kernels::roundOne;

#if defined(__AVX2__)
// The same core as roundOne, eight lanes at a time with AVX2. Variable shifts by >= 32
// give 0 (vpsllvd/vpsrlvd), which is exactly what r and frac need at the extremes of d.
struct VecParams {
  __m256i mantissaBits, minExponent, biasMinusOne, noSubnormals, maxFiniteCode, overflowCode, nanCode, mIsZero;
  __m128i mantissaShift, signShift;
  __m256i maxValueBits, overflowValueBits, nanValueBits;
  explicit VecParams(const Quantizer::Params& p)
      : mantissaBits(_mm256_set1_epi32(p.mantissaBits)),
        minExponent(_mm256_set1_epi32(p.minExponent)),
        biasMinusOne(_mm256_set1_epi32(p.biasMinusOne)),
        noSubnormals(_mm256_set1_epi32(p.subnormals ? 0 : -1)),
        maxFiniteCode(_mm256_set1_epi32(static_cast<int32_t>(p.maxFiniteCode))),
        overflowCode(_mm256_set1_epi32(static_cast<int32_t>(p.overflowCode))),
        nanCode(_mm256_set1_epi32(static_cast<int32_t>(p.nanCode))),
        mIsZero(_mm256_set1_epi32(p.mantissaBits == 0 ? -1 : 0)),
        mantissaShift(_mm_cvtsi32_si128(p.mantissaBits)),
        signShift(_mm_cvtsi32_si128(static_cast<int32_t>(p.signShift))),
        maxValueBits(_mm256_set1_epi32(static_cast<int32_t>(p.maxValueBits))),
        overflowValueBits(_mm256_set1_epi32(static_cast<int32_t>(p.overflowValueBits))),
        nanValueBits(_mm256_set1_epi32(static_cast<int32_t>(p.nanValueBits))) {}
};

template <RoundingMode kMode, bool kValue, bool kCode>
inline void roundVec(__m256i u, __m256i rnd, const VecParams& p, __m256& value, __m256i& code) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i signMask = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
  const __m256i sign = _mm256_and_si256(u, signMask);
  const __m256i a = _mm256_andnot_si256(signMask, u);
  const __m256i fe = _mm256_srli_epi32(a, 23);
  const __m256i eEff = _mm256_max_epi32(fe, one);
  const __m256i normal = _mm256_cmpgt_epi32(fe, _mm256_setzero_si256());
  const __m256i sig = _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(0x7fffff)),
                                      _mm256_and_si256(normal, _mm256_set1_epi32(0x800000)));
  const __m256i ex = _mm256_sub_epi32(eEff, _mm256_set1_epi32(127));
  const __m256i below =
      _mm256_or_si256(_mm256_cmpgt_epi32(p.minExponent, ex), _mm256_cmpeq_epi32(fe, _mm256_setzero_si256()));
  const __m256i exC = _mm256_max_epi32(ex, p.minExponent);
  const __m256i belowNoSub = _mm256_and_si256(below, p.noSubnormals);
  const __m256i qexp = _mm256_blendv_epi8(_mm256_sub_epi32(exC, p.mantissaBits), p.minExponent, belowNoSub);
  __m256i d = _mm256_sub_epi32(qexp, _mm256_sub_epi32(eEff, _mm256_set1_epi32(150)));
  d = _mm256_min_epi32(d, _mm256_set1_epi32(63));
  __m256i r = _mm256_srlv_epi32(sig, d);
  const __m256i c32 = _mm256_set1_epi32(32);
  const __m256i fracLow = _mm256_sllv_epi32(sig, _mm256_sub_epi32(c32, d));  // d == 0: shift 32 -> 0
  const __m256i fracHigh = _mm256_srlv_epi32(sig, _mm256_sub_epi32(d, c32));
  const __m256i frac = _mm256_blendv_epi8(fracLow, fracHigh, _mm256_cmpgt_epi32(d, c32));
  __m256i up = _mm256_setzero_si256();  // all-ones lanes round up
  if constexpr (kMode == RoundingMode::NearestEven) {
    const __m256i fx = _mm256_xor_si256(frac, signMask);  // unsigned compare against 2^31
    const __m256i adjust =
        _mm256_andnot_si256(below, _mm256_and_si256(p.mIsZero, _mm256_add_epi32(ex, p.biasMinusOne)));
    const __m256i odd = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_add_epi32(r, adjust), one), one);
    up = _mm256_or_si256(_mm256_cmpgt_epi32(fx, _mm256_setzero_si256()),
                         _mm256_and_si256(_mm256_cmpeq_epi32(fx, _mm256_setzero_si256()), odd));
  } else if constexpr (kMode == RoundingMode::Stochastic) {
    const __m256i sum = _mm256_add_epi32(frac, rnd);
    up = _mm256_cmpgt_epi32(_mm256_xor_si256(frac, signMask), _mm256_xor_si256(sum, signMask));  // carry out
  }
  r = _mm256_sub_epi32(r, up);
  const __m256i isNan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
  if constexpr (kValue) {
    const __m256i fr = _mm256_castps_si256(_mm256_cvtepi32_ps(r));
    const __m256i e = _mm256_add_epi32(_mm256_sub_epi32(_mm256_srli_epi32(fr, 23), _mm256_set1_epi32(127)), qexp);
    const __m256i normalBits = _mm256_add_epi32(fr, _mm256_slli_epi32(qexp, 23));
    const __m256i subBits = _mm256_sllv_epi32(r, _mm256_add_epi32(qexp, _mm256_set1_epi32(149)));
    __m256i y = _mm256_blendv_epi8(normalBits, subBits, _mm256_cmpgt_epi32(_mm256_set1_epi32(-126), e));
    y = _mm256_blendv_epi8(y, _mm256_set1_epi32(0x7f800000), _mm256_cmpgt_epi32(e, _mm256_set1_epi32(127)));
    y = _mm256_andnot_si256(_mm256_cmpeq_epi32(r, _mm256_setzero_si256()), y);
    y = _mm256_blendv_epi8(y, p.overflowValueBits, _mm256_cmpgt_epi32(y, p.maxValueBits));
    y = _mm256_blendv_epi8(y, p.nanValueBits, isNan);
    value = _mm256_castsi256_ps(_mm256_or_si256(y, sign));
  }
  if constexpr (kCode) {
    const __m256i base =
        _mm256_andnot_si256(below, _mm256_sll_epi32(_mm256_add_epi32(ex, p.biasMinusOne), p.mantissaShift));
    const __m256i rr = _mm256_blendv_epi8(r, _mm256_sll_epi32(r, p.mantissaShift), belowNoSub);
    __m256i mag = _mm256_add_epi32(base, rr);
    mag = _mm256_blendv_epi8(mag, p.overflowCode, _mm256_cmpgt_epi32(mag, p.maxFiniteCode));
    mag = _mm256_blendv_epi8(mag, p.nanCode, isNan);
    code = _mm256_or_si256(mag, _mm256_srl_epi32(sign, p.signShift));
  }
}
#endif

template <RoundingMode kMode, typename CodeT>
void kernel(const float* in, int64_t n, const uint32_t* rnd, const Quantizer::Params& p, float* values, CodeT* codes) {
  const Quantizer::Params q = p;  // a local copy: no aliasing with the outputs
  int64_t i = 0;
#if defined(__AVX2__)
  const VecParams vp(p);
  const auto loadRnd = [&](int64_t k) {
    if constexpr (kMode == RoundingMode::Stochastic) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rnd + k));
    } else {
      (void)k;
      return _mm256_setzero_si256();
    }
  };
  const auto load = [&](int64_t k) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + k)); };
  __m256 v;
  __m256i c0, c1, c2, c3;
  if (values) {
    for (; i + 8 <= n; i += 8) {
      roundVec<kMode, true, false>(load(i), loadRnd(i), vp, v, c0);
      _mm256_storeu_ps(values + i, v);
    }
  } else if constexpr (sizeof(CodeT) == 1) {
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (; i + 32 <= n; i += 32) {
      roundVec<kMode, false, true>(load(i), loadRnd(i), vp, v, c0);
      roundVec<kMode, false, true>(load(i + 8), loadRnd(i + 8), vp, v, c1);
      roundVec<kMode, false, true>(load(i + 16), loadRnd(i + 16), vp, v, c2);
      roundVec<kMode, false, true>(load(i + 24), loadRnd(i + 24), vp, v, c3);
      const __m256i packed = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), _mm256_permutevar8x32_epi32(packed, order));
    }
  } else {
    for (; i + 16 <= n; i += 16) {
      roundVec<kMode, false, true>(load(i), loadRnd(i), vp, v, c0);
      roundVec<kMode, false, true>(load(i + 8), loadRnd(i + 8), vp, v, c1);
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(c0, c1), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), packed);
    }
  }
#endif
  for (; i < n; ++i) {
    float v1 = 0.0f;
    uint32_t c = 0;
    const uint32_t bits = kMode == RoundingMode::Stochastic ? rnd[i] : 0u;
    if (values) {
      roundOne<kMode, true, false>(in[i], bits, q, v1, c);
      values[i] = v1;
    } else {
      roundOne<kMode, false, true>(in[i], bits, q, v1, c);
      codes[i] = static_cast<CodeT>(c);
    }
  }
}

}  // namespace

void randomBitsBlock(uint32_t* out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first) {
  int64_t i = 0;
#if defined(__AVX2__)
  // Philox4x32-10 (framework/core/Rng.cpp) in eight lanes: lane j is counter first + i + j,
  // and only output word 0 is kept, as randomBits32 does.
  const __m256i mul0 = _mm256_set1_epi32(static_cast<int32_t>(0xD2511F53u));
  const __m256i mul1 = _mm256_set1_epi32(static_cast<int32_t>(0xCD9E8D57u));
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i signMask = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
  const auto mulhilo = [](__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
    const __m256i even = _mm256_mul_epu32(a, m);
    const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
    hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  };
  for (; i + 8 <= n; i += 8) {
    const uint64_t base = first + static_cast<uint64_t>(i);
    const __m256i baseLo = _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(base)));
    __m256i c0 = _mm256_add_epi32(baseLo, lanes);
    // Carry into the high word where the low word wrapped (unsigned c0 < baseLo).
    const __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(baseLo, signMask), _mm256_xor_si256(c0, signMask));
    __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(base >> 32))), carry);
    __m256i c2 = _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(stream)));
    __m256i c3 = _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(stream >> 32)));
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      __m256i hi0, lo0, hi1, lo1;
      mulhilo(c0, mul0, hi0, lo0);
      mulhilo(c2, mul1, hi1, lo1);
      const __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int32_t>(k0)));
      const __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int32_t>(k1)));
      c0 = n0;
      c1 = lo1;
      c2 = n2;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), c0);
  }
#endif
  for (; i < n; ++i) out[i] = randomBits32(seed, stream, first + static_cast<uint64_t>(i));
}

namespace {

template <typename CodeT>
void run(const float* in, int64_t n, RoundingMode mode, const EncodeContext& ctx, const Quantizer::Params& p,
         float* values, CodeT* codes) {
  switch (mode) {
    case RoundingMode::NearestEven:
      kernel<RoundingMode::NearestEven>(in, n, nullptr, p, values, codes);
      return;
    case RoundingMode::TowardZero:
      kernel<RoundingMode::TowardZero>(in, n, nullptr, p, values, codes);
      return;
    case RoundingMode::Stochastic: {
      uint32_t rnd[kChunk];
      for (int64_t begin = 0; begin < n; begin += kChunk) {
        const int64_t m = std::min(kChunk, n - begin);
        randomBitsBlock(rnd, m, ctx.seed, ctx.stream, static_cast<uint64_t>(ctx.offset + begin));
        kernel<RoundingMode::Stochastic>(in + begin, m, rnd, p, values ? values + begin : nullptr,
                                         codes ? codes + begin : nullptr);
      }
      return;
    }
  }
}

}  // namespace

Quantizer::Quantizer(const FloatFormat& format) : format_(format) {
  format_.validate();
  const bool sat = format_.overflow == Overflow::Saturate;
  params_.mantissaBits = format_.mantissaBits;
  params_.minExponent = format_.minExponent();
  params_.biasMinusOne = format_.bias - 1;
  params_.subnormals = format_.subnormals ? 1 : 0;
  params_.maxFiniteCode = format_.maxFiniteCode();
  params_.overflowCode = sat ? format_.maxFiniteCode() : (format_.hasInf() ? format_.infCode() : format_.nanCode());
  params_.nanCode = format_.nanCode();
  params_.signShift = static_cast<uint32_t>(31 - (format_.exponentBits + format_.mantissaBits));
  params_.maxValueBits = std::bit_cast<uint32_t>(format_.maxValue());
  params_.overflowValueBits = std::bit_cast<uint32_t>(std::fabs(format_.decode(params_.overflowCode)));
  params_.nanValueBits = std::bit_cast<uint32_t>(std::fabs(format_.decode(params_.nanCode)));
}

kernels::CodeDecodeParams codeDecodeParams(const FloatFormat& format, bool f16cNans) {
  kernels::CodeDecodeParams p{};
  p.layout = kernels::CodeDecodeParams::Generic;
  p.exponentBits = format.exponentBits;
  p.mantissaBits = format.mantissaBits;
  p.bias = format.bias;
  p.subnormals = format.subnormals ? 1 : 0;
  p.specials = static_cast<int32_t>(format.specials);
  p.nanCode = format.nanCode();
  const bool ieee = format.subnormals && format.specials == Specials::Ieee;
  if (ieee && format.exponentBits == 8 && format.mantissaBits == 7 && format.bias == 127) {
    p.layout = kernels::CodeDecodeParams::Bf16;
  } else if (f16cNans && ieee && format.exponentBits == 5 && format.mantissaBits == 10 && format.bias == 15) {
    p.layout = kernels::CodeDecodeParams::Fp16;
  }
  return p;
}

void Quantizer::quantize(const float* in, float* out, int64_t n, RoundingMode mode, const EncodeContext& ctx) const {
  run<uint8_t>(in, n, mode, ctx, params_, out, nullptr);
}

void Quantizer::encode(const float* in, uint8_t* out, int64_t n, RoundingMode mode, const EncodeContext& ctx) const {
  APS_ASSERT(format_.bits() <= 8);
  run<uint8_t>(in, n, mode, ctx, params_, nullptr, out);
}

void Quantizer::encode(const float* in, uint16_t* out, int64_t n, RoundingMode mode, const EncodeContext& ctx) const {
  APS_ASSERT(format_.bits() <= 16);
  run<uint16_t>(in, n, mode, ctx, params_, nullptr, out);
}

float Quantizer::quantize(float x, RoundingMode mode, uint32_t randomBits) const {
  float v = 0.0f;
  uint32_t c = 0;
  switch (mode) {
    case RoundingMode::NearestEven:
      roundOne<RoundingMode::NearestEven, true, false>(x, 0, params_, v, c);
      break;
    case RoundingMode::TowardZero:
      roundOne<RoundingMode::TowardZero, true, false>(x, 0, params_, v, c);
      break;
    case RoundingMode::Stochastic:
      roundOne<RoundingMode::Stochastic, true, false>(x, randomBits, params_, v, c);
      break;
  }
  return v;
}

uint32_t Quantizer::encode(float x, RoundingMode mode, uint32_t randomBits) const {
  float v = 0.0f;
  uint32_t c = 0;
  switch (mode) {
    case RoundingMode::NearestEven:
      roundOne<RoundingMode::NearestEven, false, true>(x, 0, params_, v, c);
      break;
    case RoundingMode::TowardZero:
      roundOne<RoundingMode::TowardZero, false, true>(x, 0, params_, v, c);
      break;
    case RoundingMode::Stochastic:
      roundOne<RoundingMode::Stochastic, false, true>(x, randomBits, params_, v, c);
      break;
  }
  return c;
}

void roundToFormat(float* data, int64_t n, const FloatFormat& format, RoundingMode mode, const EncodeContext& ctx) {
  const Quantizer quantizer(format);
  // Element-wise, and stochastic bits are indexed by element, so the split is invisible.
  parallelFor(n, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    EncodeContext local = ctx;
    local.offset = ctx.offset + begin;
    quantizer.quantize(data + begin, data + begin, end - begin, mode, local);
  });
}

}  // namespace aps::precision
