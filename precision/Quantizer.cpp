#include "precision/Quantizer.h"

#include "framework/numerics/FloatRounding.h"

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

// The rounding core for one value is kernels::roundOne (framework/numerics/FloatRounding.h,
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

#if defined(__AVX512F__) && defined(__AVX512BW__)
// Codes only, sixteen lanes with AVX-512, by a shorter route than roundOne's that gives the same
// integers: above the format's normal threshold the quantum is 2^(ex - M), so the code is
// fp32's own bits shifted right by 23 - M and rebiased, the dropped bits are the fraction;
// below it the significand is shifted by a per-lane distance, as roundOne does. Rounding up
// adds one to the code, which carries into the exponent field exactly as r + 1 does.
struct CodeParams16 {
  __m512i rebias, dBelow, leftBelow, rightBelow, maxFiniteCode, overflowCode, nanCode, signBit;
  __m128i aboveShift, fracShift, belowShift, signShift;
  int32_t belowFe;  // lanes with fp32 exponent field below this take the per-lane shift
  // Nearest rounding's shorter route (roundNearest16), where the quantum below 2^emin is
  // 2^q with q >= -125: there |x| * 2^-q is exact and an fp32 subnormal input (DAZ or not)
  // is below half a quantum, so the conversion's ties-to-even gives roundOne's count.
  static bool shortRoute(const Quantizer::Params& p) {
    const int32_t q = p.minExponent - (p.subnormals ? p.mantissaBits : 0);
    return q >= -125 && q <= 125 && p.minExponent + 127 >= 1;
  }
  __m512i belowBits, halfMinusOne;
  __m512 belowScale;
  explicit CodeParams16(const Quantizer::Params& p) {
    const int32_t m = p.mantissaBits;
    // roundOne's d for lanes below: qexp - (eEff - 150), qexp = emin - M (emin without subnormals).
    const int32_t k = p.minExponent - (p.subnormals ? m : 0) + 150;
    belowBits = _mm512_set1_epi32(std::max(p.minExponent + 127, 1) << 23);
    halfMinusOne = _mm512_set1_epi32((1 << (22 - m)) - 1);
    belowScale = _mm512_set1_ps(std::ldexp(1.0f, 150 - k));
    rebias = _mm512_set1_epi32((127 - (p.biasMinusOne + 1)) << m);
    dBelow = _mm512_set1_epi32(k);
    leftBelow = _mm512_set1_epi32(32 - k);
    rightBelow = _mm512_set1_epi32(k - 32);
    maxFiniteCode = _mm512_set1_epi32(static_cast<int32_t>(p.maxFiniteCode));
    overflowCode = _mm512_set1_epi32(static_cast<int32_t>(p.overflowCode));
    nanCode = _mm512_set1_epi32(static_cast<int32_t>(p.nanCode));
    signBit = _mm512_set1_epi32(static_cast<int32_t>(0x80000000u >> p.signShift));
    aboveShift = _mm_cvtsi32_si128(23 - m);
    fracShift = _mm_cvtsi32_si128(9 + m);
    belowShift = _mm_cvtsi32_si128(p.subnormals ? 0 : m);
    signShift = _mm_cvtsi32_si128(static_cast<int32_t>(p.signShift));
    belowFe = std::max(p.minExponent + 127, 1);
  }
};

// The last steps of every route: without subnormals the count below 2^emin is of 2^emin;
// overflow, NaN and the sign.
inline __m512i finishCodes16(__m512i code, __mmask16 below, __m512i a, __m512i u, const CodeParams16& p) {
  code = _mm512_mask_sll_epi32(code, below, code, p.belowShift);  // without subnormals: r counts 2^emin
  code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(code, p.maxFiniteCode), p.overflowCode);
  code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7f800000)), p.nanCode);
  return _mm512_ternarylogic_epi32(code, _mm512_srl_epi32(u, p.signShift), p.signBit, 0xF8);  // code | (s & bit)
}

// Nearest rounding in about half roundCodes16's instructions (where shortRoute holds): above 2^emin the
// bits rounded at bit 23 - M by one add (ties to an even last bit, carrying into the exponent
// field); below it the count of quanta |x| * 2^-q converted with ties to even (embedded
// rounding, so MXCSR's mode does not matter; the product is exact).
inline __m512i roundNearest16(__m512i u, const CodeParams16& p) {
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 below = _mm512_cmplt_epi32_mask(a, p.belowBits);
  const __m512i odd = _mm512_and_si512(_mm512_srl_epi32(a, p.aboveShift), _mm512_set1_epi32(1));
  const __m512i up = _mm512_add_epi32(_mm512_add_epi32(a, p.halfMinusOne), odd);
  const __m512i codeAbove = _mm512_sub_epi32(_mm512_srl_epi32(up, p.aboveShift), p.rebias);
  const __m512 scaled =
      _mm512_mul_round_ps(_mm512_castsi512_ps(a), p.belowScale, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i codeBelow = _mm512_cvt_roundps_epi32(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return finishCodes16(_mm512_mask_mov_epi32(codeAbove, below, codeBelow), below, a, u, p);
}

// kShort: nearest rounding by roundNearest16 (the caller checked CodeParams16::shortRoute).
template <RoundingMode kMode, bool kShort = false>
inline __m512i roundCodes16(__m512i u, __m512i rnd, const CodeParams16& p) {
  if constexpr (kShort) return roundNearest16(u, p);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512i fe = _mm512_srli_epi32(a, 23);
  const __mmask16 below = _mm512_cmplt_epi32_mask(fe, _mm512_set1_epi32(p.belowFe));
  const __m512i codeAbove = _mm512_sub_epi32(_mm512_srl_epi32(a, p.aboveShift), p.rebias);
  const __m512i fracAbove = _mm512_sll_epi32(a, p.fracShift);
  const __mmask16 normal = _mm512_test_epi32_mask(a, _mm512_set1_epi32(0x7f800000));
  const __m512i mant = _mm512_and_si512(a, _mm512_set1_epi32(0x7fffff));
  const __m512i sig = _mm512_mask_or_epi32(mant, normal, mant, _mm512_set1_epi32(0x800000));
  const __m512i eEff = _mm512_max_epi32(fe, one);
  // Shifts by >= 32 (or "negative" ones, huge as unsigned) give 0, which is what roundOne's
  // clamped shifts give for a 24-bit significand.
  const __m512i d = _mm512_sub_epi32(p.dBelow, eEff);
  const __m512i codeBelow = _mm512_srlv_epi32(sig, d);
  const __m512i fracBelow = _mm512_or_si512(_mm512_sllv_epi32(sig, _mm512_add_epi32(p.leftBelow, eEff)),
                                            _mm512_srlv_epi32(sig, _mm512_sub_epi32(p.rightBelow, eEff)));
  __m512i code = _mm512_mask_mov_epi32(codeAbove, below, codeBelow);
  const __m512i frac = _mm512_mask_mov_epi32(fracAbove, below, fracBelow);
  if constexpr (kMode == RoundingMode::NearestEven) {
    // Up when frac + 2^31 - 1 + (code odd) carries out of 32 bits (ties to the even code; for
    // M == 0 the code's last bit is the exponent field's, as roundOne's "odd" has it).
    const __m512i bias = _mm512_add_epi32(_mm512_and_si512(code, one), _mm512_set1_epi32(0x7fffffff));
    const __mmask16 up = _mm512_cmplt_epu32_mask(_mm512_add_epi32(frac, bias), frac);
    code = _mm512_mask_add_epi32(code, up, code, one);
  } else if constexpr (kMode == RoundingMode::Stochastic) {
    const __mmask16 up = _mm512_cmplt_epu32_mask(_mm512_add_epi32(frac, rnd), frac);
    code = _mm512_mask_add_epi32(code, up, code, one);
  } else {
    (void)rnd;
  }
  return finishCodes16(code, below, a, u, p);
}

// Philox4x32-10 (framework/core/Philox.h), 16 blocks at a time: block j is counter
// firstBlock + j, and its four output words are the bits of elements 4 (firstBlock + j) + 0..3,
// as randomBits32 draws them. Each 32-bit state word lives in the low half of a 64-bit lane, so
// one vpmuludq gives a lane's whole product (the low word in place, the high word one shift
// away) and the 64-bit counter add carries into the high counter word by itself; high halves
// hold garbage that vpmuludq never reads. Two groups of eight lanes go through the rounds
// together to hide the multiplies' latency.
struct PhiloxKeys {
  __m512i k0[10], k1[10], c3, round0Hi, round0Lo;
  PhiloxKeys(uint64_t seed, uint64_t stream) {
    uint32_t a = static_cast<uint32_t>(seed), b = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round, a += 0x9E3779B9u, b += 0xBB67AE85u) {
      k0[round] = _mm512_set1_epi32(static_cast<int32_t>(a));
      k1[round] = _mm512_set1_epi32(static_cast<int32_t>(b));
    }
    // The first round's product of counter word 2 (the stream's low word) is the same in every lane.
    const uint64_t product = uint64_t{static_cast<uint32_t>(stream)} * 0xCD9E8D57u;
    round0Hi = _mm512_set1_epi64(static_cast<int64_t>((product >> 32) ^ static_cast<uint32_t>(seed)));
    round0Lo = _mm512_set1_epi64(static_cast<int64_t>(product));
    c3 = _mm512_set1_epi64(static_cast<int64_t>(stream >> 32));
  }
};

// Random bits of elements 4 firstBlock .. 4 firstBlock + 32 kPairs * 2 - 1 in element order,
// sixteen per vector (out[0] holds elements 0-15, ...): kPairs * 16 blocks, two groups of eight
// per pair; more groups in flight hide more of the multiplies' latency.
template <int kPairs>
inline void philoxBlocks(uint64_t firstBlock, const PhiloxKeys& k, __m512i out[4 * kPairs]) {
  constexpr int kGroups = 2 * kPairs;
  constexpr int64_t kBlockMask = (int64_t{1} << 62) - 1;
  const __m512i mul0 = _mm512_set1_epi64(0xD2511F53);
  const __m512i mul1 = _mm512_set1_epi64(0xCD9E8D57);
  const __m512i base =
      _mm512_add_epi64(_mm512_set1_epi64(static_cast<int64_t>(firstBlock)), _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
  __m512i c0[kGroups], c1[kGroups], c2[kGroups], c3[kGroups];
  for (int g = 0; g < kGroups; ++g) {
    // Block counters wrap at 2^62, as element indices (64 bits) shifted right by two do.
    const __m512i counter =
        _mm512_and_si512(_mm512_add_epi64(base, _mm512_set1_epi64(8 * g)), _mm512_set1_epi64(kBlockMask));
    const __m512i p0 = _mm512_mul_epu32(counter, mul0);
    c0[g] = _mm512_xor_si512(_mm512_srli_epi64(counter, 32), k.round0Hi);  // round 0, word 0
    c1[g] = k.round0Lo;
    c2[g] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), k.c3, k.k1[0], 0x96);  // three-way xor
    c3[g] = p0;
  }
  for (int round = 1; round < 10; ++round) {
    for (int g = 0; g < kGroups; ++g) {
      const __m512i p0 = _mm512_mul_epu32(c0[g], mul0);
      const __m512i p1 = _mm512_mul_epu32(c2[g], mul1);
      c0[g] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1[g], k.k0[round], 0x96);
      c1[g] = p1;
      c2[g] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c3[g], k.k1[round], 0x96);
      c3[g] = p0;
    }
  }
  // Per pair of groups: word w of its 16 blocks (the low halves of the lanes), then the 4 x 16
  // transpose to element order: 32-bit unpacks pair words 0/1 and 2/3, 64-bit unpacks make each
  // 128-bit lane one block's four words, and 128-bit shuffles put blocks 4j .. 4j + 3 in out[j].
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int q = 0; q < kPairs; ++q) {
    const int g = 2 * q;
    const __m512i w0 = _mm512_permutex2var_epi32(c0[g], evens, c0[g + 1]);
    const __m512i w1 = _mm512_permutex2var_epi32(c1[g], evens, c1[g + 1]);
    const __m512i w2 = _mm512_permutex2var_epi32(c2[g], evens, c2[g + 1]);
    const __m512i w3 = _mm512_permutex2var_epi32(c3[g], evens, c3[g + 1]);
    const __m512i t0 = _mm512_unpacklo_epi32(w0, w1), t1 = _mm512_unpackhi_epi32(w0, w1);
    const __m512i t2 = _mm512_unpacklo_epi32(w2, w3), t3 = _mm512_unpackhi_epi32(w2, w3);
    const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);  // blocks 4l, 4l + 1
    const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);  // blocks 4l + 2, 4l + 3
    const __m512i v0 = _mm512_shuffle_i32x4(u0, u1, 0x44), v1 = _mm512_shuffle_i32x4(u2, u3, 0x44);
    const __m512i v2 = _mm512_shuffle_i32x4(u0, u1, 0xEE), v3 = _mm512_shuffle_i32x4(u2, u3, 0xEE);
    out[4 * q + 0] = _mm512_shuffle_i32x4(v0, v1, 0x88);
    out[4 * q + 1] = _mm512_shuffle_i32x4(v0, v1, 0xDD);
    out[4 * q + 2] = _mm512_shuffle_i32x4(v2, v3, 0x88);
    out[4 * q + 3] = _mm512_shuffle_i32x4(v2, v3, 0xDD);
  }
}

// Random bits of elements first .. first + 64 kPairs - 1 in element order. When first is not a
// multiple of four the window straddles one block more: that one is drawn by the scalar Philox
// and the words shift down by first % 4 lanes.
template <int kPairs, int kShift>
inline void philoxShifted(uint64_t first, const PhiloxKeys& k, uint64_t seed, uint64_t stream,
                          __m512i out[4 * kPairs]) {
  constexpr int kVectors = 4 * kPairs;
  const uint64_t block = first >> 2;
  __m512i e[kVectors];
  philoxBlocks<kPairs>(block, k, e);
  uint32_t extra[4];
  philox4x32(seed, stream, (block + 16 * kPairs) & ((uint64_t{1} << 62) - 1), extra);
  const __m512i last = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(extra)));
  for (int j = 0; j + 1 < kVectors; ++j) out[j] = _mm512_alignr_epi32(e[j + 1], e[j], kShift);
  out[kVectors - 1] = _mm512_alignr_epi32(last, e[kVectors - 1], kShift);
}

template <int kPairs>
inline void philoxElements(uint64_t first, const PhiloxKeys& k, uint64_t seed, uint64_t stream,
                           __m512i out[4 * kPairs]) {
  switch (first & 3) {
    case 0:
      philoxBlocks<kPairs>(first >> 2, k, out);
      return;
    case 1:
      philoxShifted<kPairs, 1>(first, k, seed, stream, out);
      return;
    case 2:
      philoxShifted<kPairs, 2>(first, k, seed, stream, out);
      return;
    default:
      philoxShifted<kPairs, 3>(first, k, seed, stream, out);
      return;
  }
}

// Sixteen lanes' codes to 1, 2 or 4 bytes each (64 values per call), or two nibbles per byte
// (codes < 16). packus works within 128-bit lanes; the permutes restore element order.
template <typename CodeT>
inline void storeCodes64(const __m512i c[4], CodeT* out, bool nibbles) {
  if constexpr (sizeof(CodeT) == 1) {
    const __m512i bytes =
        _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                                 _mm512_packus_epi16(_mm512_packus_epi32(c[0], c[1]), _mm512_packus_epi32(c[2], c[3])));
    if (nibbles) {
      // Element 2i in the low nibble: each 16-bit pair b0 | b1 << 8 becomes b0 | b1 << 4.
      const __m512i pairs = _mm512_or_si512(bytes, _mm512_srli_epi16(bytes, 4));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(pairs));
    } else {
      _mm512_storeu_si512(out, bytes);
    }
  } else {
    const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    _mm512_storeu_si512(out, _mm512_permutexvar_epi64(order, _mm512_packus_epi32(c[0], c[1])));
    _mm512_storeu_si512(out + 32, _mm512_permutexvar_epi64(order, _mm512_packus_epi32(c[2], c[3])));
  }
}

// Codes of in[0, n) into out (nibble pairs with `nibbles`); returns n.
template <RoundingMode kMode, bool kShort, typename CodeT>
int64_t encode64(const float* in, int64_t n, const Quantizer::Params& params, const EncodeContext& ctx, CodeT* out,
                 bool nibbles) {
  const CodeParams16 p(params);
  const PhiloxKeys keys(ctx.seed, ctx.stream);
  int64_t i = 0;
  if constexpr (kMode == RoundingMode::Stochastic) {
    // 128 values a step: the random bits of 32 Philox blocks at once keep the multipliers busy.
    for (; i + 128 <= n; i += 128) {
      __m512i c[8], rnd[8];
      philoxElements<2>(static_cast<uint64_t>(ctx.offset + i), keys, ctx.seed, ctx.stream, rnd);
      for (int j = 0; j < 8; ++j) c[j] = roundCodes16<kMode, kShort>(_mm512_loadu_si512(in + i + 16 * j), rnd[j], p);
      storeCodes64(c, nibbles ? out + i / 2 : out + i, nibbles);
      storeCodes64(c + 4, nibbles ? out + (i + 64) / 2 : out + i + 64, nibbles);
    }
  }
  for (; i + 64 <= n; i += 64) {
    __m512i c[4], rnd[4] = {};
    if constexpr (kMode == RoundingMode::Stochastic)
      philoxElements<1>(static_cast<uint64_t>(ctx.offset + i), keys, ctx.seed, ctx.stream, rnd);
    for (int j = 0; j < 4; ++j) c[j] = roundCodes16<kMode, kShort>(_mm512_loadu_si512(in + i + 16 * j), rnd[j], p);
    storeCodes64(c, nibbles ? out + i / 2 : out + i, nibbles);
  }
  if (i == n) return n;
  // The last m < 64 values the same way: lanes past the end read as +0 (code 0, so an odd
  // count's last byte keeps its high nibble 0, as the scalar path writes it); the codes go
  // through a local block, of which the bytes of the m codes are copied. The chunks of a
  // simulated world's small buckets are tens of values long: these would otherwise be scalar.
  const int64_t m = n - i;
  __m512i c[4], rnd[4] = {};
  if constexpr (kMode == RoundingMode::Stochastic)
    philoxElements<1>(static_cast<uint64_t>(ctx.offset + i), keys, ctx.seed, ctx.stream, rnd);
  for (int j = 0; j < 4; ++j) {
    const int64_t lanes = std::clamp<int64_t>(m - 16 * j, 0, 16);
    const auto mask = static_cast<__mmask16>((uint32_t{1} << lanes) - 1u);
    c[j] = roundCodes16<kMode, kShort>(_mm512_maskz_loadu_epi32(mask, in + i + 16 * j), rnd[j], p);
  }
  alignas(64) CodeT block[64];
  storeCodes64(c, block, nibbles);
  std::memcpy(nibbles ? out + i / 2 : out + i, block, nibbles ? static_cast<size_t>((m + 1) / 2) : m * sizeof(CodeT));
  return n;
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
  // Up to the next multiple of four one element at a time; then whole Philox blocks, four
  // elements each (32 blocks per step with AVX-512).
  int64_t i = 0;
  for (; i < n && ((first + static_cast<uint64_t>(i)) & 3) != 0; ++i)
    out[i] = randomBits32(seed, stream, first + static_cast<uint64_t>(i));
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (n - i >= 128) {
    const PhiloxKeys keys(seed, stream);
    for (; i + 128 <= n; i += 128) {
      __m512i bits[8];
      philoxBlocks<2>((first + static_cast<uint64_t>(i)) >> 2, keys, bits);
      for (int j = 0; j < 8; ++j) _mm512_storeu_si512(out + i + 16 * j, bits[j]);
    }
  }
#endif
  for (; i + 4 <= n; i += 4) philox4x32(seed, stream, (first + static_cast<uint64_t>(i)) >> 2, out + i);
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

// Codes of in[0, n), two per byte with `nibbles`: by the AVX-512 kernel where built (random
// bits drawn in registers, the last values through masked loads), else by `run`.
template <typename CodeT>
void runCodes(const float* in, int64_t n, RoundingMode mode, const EncodeContext& ctx, const Quantizer::Params& p,
              CodeT* codes, bool nibbles) {
  int64_t done = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  switch (mode) {
    case RoundingMode::NearestEven:
      done = CodeParams16::shortRoute(p) ? encode64<RoundingMode::NearestEven, true>(in, n, p, ctx, codes, nibbles)
                                         : encode64<RoundingMode::NearestEven, false>(in, n, p, ctx, codes, nibbles);
      break;
    case RoundingMode::TowardZero:
      done = encode64<RoundingMode::TowardZero, false>(in, n, p, ctx, codes, nibbles);
      break;
    case RoundingMode::Stochastic:
      done = encode64<RoundingMode::Stochastic, false>(in, n, p, ctx, codes, nibbles);
      break;
  }
#endif
  EncodeContext rest = ctx;
  rest.offset = ctx.offset + done;
  if (!nibbles) {
    run<CodeT>(in + done, n - done, mode, rest, p, nullptr, codes + done);
    return;
  }
  uint8_t* dst = reinterpret_cast<uint8_t*>(codes) + done / 2;  // done is even
  uint8_t local[kChunk];
  for (int64_t begin = done; begin < n; begin += kChunk) {
    const int64_t m = std::min(kChunk, n - begin);
    rest.offset = ctx.offset + begin;
    run<uint8_t>(in + begin, m, mode, rest, p, nullptr, local);
    for (int64_t i = 0; i + 1 < m; i += 2) *dst++ = static_cast<uint8_t>(local[i] | (local[i + 1] << 4));
    if (m % 2) *dst++ = local[m - 1];
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
  runCodes<uint8_t>(in, n, mode, ctx, params_, out, false);
}

void Quantizer::encodeNibbles(const float* in, uint8_t* out, int64_t n, RoundingMode mode,
                              const EncodeContext& ctx) const {
  APS_ASSERT(format_.bits() <= 4);
  runCodes<uint8_t>(in, n, mode, ctx, params_, out, true);
}

void Quantizer::encode(const float* in, uint16_t* out, int64_t n, RoundingMode mode, const EncodeContext& ctx) const {
  APS_ASSERT(format_.bits() <= 16);
  runCodes<uint16_t>(in, n, mode, ctx, params_, out, false);
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
