#include "precision/FloatCodec.h"

#include "framework/core/Error.h"
#include "precision/StreamPrefetch.h"
#include "precision/kernels/Scaling.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

// Byte codes decoded through fp16 (FloatCodec::HalfDecoder16) need AVX-512 VL/BW and F16C.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__F16C__)
#define APS_HALF_BYTE_DECODE 1
#endif

namespace aps::precision {

namespace {

constexpr int64_t kChunk = 4096;  // values per fused step; even, so nibble chunks start on a byte

bool sameLayout(const FloatFormat& a, const FloatFormat& b) {
  return a.exponentBits == b.exponentBits && a.mantissaBits == b.mantissaBits && a.bias == b.bias &&
         a.subnormals == b.subnormals && a.specials == b.specials;
}

// Stores a decoded value, or adds it to what is there (decodeAdd). A decoded NaN is kept
// (made quiet), whatever the sum held: which NaN an add of two NaNs returns is otherwise the
// instruction's choice (x86: its first operand's), and the compiler orders the operands as it
// likes, differently in different loops. This way every path (scalar, vector, a masked last
// step) gives the same bits wherever a call starts (Codec::roundTripsAlikeAtAnyCut): the
// scalar add is addDecoded, which the device's decode-add calls too, and the vector adds
// (addKeepingNaN, and a blend in decodeWide's 8-value fp16 step) give its result lane by lane.
template <bool kAdd>
inline void put(float* p, float v) {
  if constexpr (kAdd) {
    *p = addDecoded(*p, v);
  } else {
    *p = v;
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
inline __m512 addKeepingNaN(__m512 sum, __m512 v) {
  const __m512 quiet = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x00400000)));
  return _mm512_mask_mov_ps(_mm512_add_ps(sum, v), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), quiet);
}
template <bool kAdd>
inline void put16(float* p, __m512 v) {
  if constexpr (kAdd) v = addKeepingNaN(_mm512_loadu_ps(p), v);
  _mm512_storeu_ps(p, v);
}
// put16 of the lanes in `lanes` (a last step of fewer than 16 values).
template <bool kAdd>
inline void put16Masked(float* p, __mmask16 lanes, __m512 v) {
  if constexpr (kAdd) v = addKeepingNaN(_mm512_maskz_loadu_ps(lanes, p), v);
  _mm512_mask_storeu_ps(p, lanes, v);
}
inline __mmask16 firstLanes(int64_t count) { return static_cast<__mmask16>((1u << count) - 1u); }

// fp16 (F16C) and bf16 codes with round-to-nearest-even, 32 values per step: the rounding of
// the hardware conversion (fp16) or of the integer add (bf16), then roundOne's overflow policy
// (a rounded magnitude above the largest finite code becomes overflowCode) and its NaN code,
// both with the value's sign. The input is prefetched ahead (StreamPrefetch.h). Returns the
// count encoded (a multiple of 32 but for the streaming path's start, see below).
template <bool kBf16>
int64_t encodeHalf32(const float* in, int64_t n, const kernels::RoundingParams& p, uint8_t* out) {
  const __m512i signBit = _mm512_set1_epi16(static_cast<int16_t>(0x8000));
  const __m512i maxFinite = _mm512_set1_epi16(static_cast<int16_t>(p.maxFiniteCode));
  const __m512i overflowCode = _mm512_set1_epi16(static_cast<int16_t>(p.overflowCode));
  const __m512i nanCode = _mm512_set1_epi16(static_cast<int16_t>(p.nanCode));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i half = _mm512_set1_epi32(0x7fff);
  const auto codes16 = [&](__m512 x) {
    if constexpr (kBf16) {  // bits + 0x7fff + (bit 16), the carry rounding up into the kept half
      const __m512i u = _mm512_castps_si512(x);
      const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
      return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, half), odd), 16));
    } else {
      return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
  };
  const auto codes32 = [&](const float* at) {
    __m512 x0 = _mm512_loadu_ps(at), x1 = _mm512_loadu_ps(at + 16);
    // One load per vector: left to itself GCC reads each vector again for every use, and the
    // extra loads of lines still on their way from memory fill the load queue (measured:
    // 10-25% slower on a stream larger than the caches, docs/PERFORMANCE.md).
    asm("" : "+v"(x0), "+v"(x1));
    const auto both = [](__mmask16 lo, __mmask16 hi) { return _mm512_kunpackw(hi, lo); };
    const __mmask32 nan = both(_mm512_cmp_ps_mask(x0, x0, _CMP_UNORD_Q), _mm512_cmp_ps_mask(x1, x1, _CMP_UNORD_Q));
    const __mmask32 negative = both(_mm512_cmplt_epi32_mask(_mm512_castps_si512(x0), _mm512_setzero_si512()),
                                    _mm512_cmplt_epi32_mask(_mm512_castps_si512(x1), _mm512_setzero_si512()));
    __m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(codes16(x0)), codes16(x1), 1);
    c = _mm512_mask_mov_epi16(c, _mm512_cmpgt_epu16_mask(_mm512_andnot_si512(signBit, c), maxFinite), overflowCode);
    c = _mm512_mask_mov_epi16(c, nan, nanCode);  // bf16's add may have carried a NaN into the sign
    return _mm512_mask_mov_epi16(c, negative, _mm512_or_si512(c, signBit));
  };
  int64_t i = 0;
  // Large outputs (nonTemporalBytes) by non-temporal stores, which need 64-byte alignment: the
  // first 32 codes by a plain store, then from the first aligned code on (those in between
  // written twice, the same bytes).
  if (n >= 64 && static_cast<size_t>(n) * 2 >= nonTemporalBytes() && reinterpret_cast<uintptr_t>(out) % 2 == 0) {
    _mm512_storeu_si512(out, codes32(in));
    i = static_cast<int64_t>((64 - reinterpret_cast<uintptr_t>(out) % 64) % 64 / 2);
    for (; i + 32 <= n; i += 32) {
      prefetchAhead(in + i, 2);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + 2 * i), codes32(in + i));
    }
    _mm_sfence();
    return i;
  }
  for (; i + 32 <= n; i += 32) {
    prefetchAhead(in + i, 2);
    _mm512_storeu_si512(out + 2 * i, codes32(in + i));
  }
  return i;
}
#endif

}  // namespace

FloatCodec::FloatCodec(const FloatFormat& format, RoundingMode rounding)
    : quantizer_(format), rounding_(rounding), decoder_(Decoder::Table) {
#if defined(__F16C__)
  decodeParams_ = codeDecodeParams(format, true);
#else
  decodeParams_ = codeDecodeParams(format, false);
#endif
  const int bits = format.bits();
  width_ = bits <= 4 ? 0 : bits <= 8 ? 1 : bits <= 16 ? 2 : 4;
  if (width_ == 4) {
    decoder_ = Decoder::Fp32;  // the wire carries the rounded value's fp32 bits
    // fp32 itself (IEEE overflow): rounding changes nothing but NaNs, in every mode (no bits
    // below the last, so stochastic rounding never rounds up), so encode is a copy.
    if (sameLayout(format, FloatFormat::preset("fp32")) && format.overflow == Overflow::Infinity) {
      identityNanBits_ =
          std::bit_cast<uint32_t>(quantizer_.quantize(std::numeric_limits<float>::quiet_NaN())) & 0x7fffffffu;
    }
    return;
  }
  if (sameLayout(format, FloatFormat::preset("bf16"))) decoder_ = Decoder::Bf16;
#if defined(__F16C__)
  if (sameLayout(format, FloatFormat::preset("fp16"))) decoder_ = Decoder::Fp16;
#endif
  if (decoder_ != Decoder::Table) return;  // bf16 and fp16 decode without a table
  const uint32_t codes = width_ == 2 ? 65536u : 256u;
  const uint32_t mask = (1u << bits) - 1;
  table_.resize(codes);
  for (uint32_t c = 0; c < codes; ++c) table_[c] = kernels::decodeCode(c & mask, decodeParams_);
  if (width_ == 1) {
    bit7Flip_ = std::bit_cast<uint32_t>(table_[128]) ^ std::bit_cast<uint32_t>(table_[0]);
    bit7Symmetric_ = true;
    for (uint32_t c = 0; c < 128; ++c) {
      const uint32_t lo = std::bit_cast<uint32_t>(table_[c]), hi = std::bit_cast<uint32_t>(table_[c | 128]);
      bit7Symmetric_ = bit7Symmetric_ && (lo ^ hi) == bit7Flip_;
    }
#if defined(APS_HALF_BYTE_DECODE)
    probeHalfLayout();
#endif
  }
  setUpValueRounding();
}

void FloatCodec::setUpValueRounding() {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  const kernels::RoundingParams& p = quantizer_.params();
  const int32_t q = p.subnormals != 0 ? p.minExponent - p.mantissaBits : p.minExponent;
  if (rounding_ != RoundingMode::NearestEven || width_ > 1 || p.mantissaBits < 0 || p.mantissaBits >= 23 ||
      p.minExponent < -126 || q < -125 || q + 23 > 127)
    return;
  const uint32_t codeSign = 0x80000000u >> p.signShift;
  const auto bits = [&](uint32_t code) { return std::bit_cast<uint32_t>(table_[code]); };
  // The overflow and NaN codes decode to a magnitude, and with the sign bit to its negative.
  for (uint32_t code : {p.overflowCode, p.nanCode}) {
    if ((bits(code) & 0x80000000u) != 0 || bits(code | codeSign) != (bits(code) | 0x80000000u)) return;
  }
  ValueRounding& v = values_;
  v.shift = 23u - static_cast<uint32_t>(p.mantissaBits);
  v.halfMinusOne = (1u << (v.shift - 1)) - 1;
  // M = 0: ties go to the even exponent field, biased by the format's bias, not fp32's 127.
  v.lsbFlip = p.mantissaBits == 0 ? static_cast<uint32_t>(p.biasMinusOne + 1 - 127) & 1u : 0u;
  v.minNormalBits = static_cast<uint32_t>(p.minExponent + 127) << 23;
  v.maxValueBits = p.maxValueBits;
  v.overflowBits = bits(p.overflowCode);
  v.nanBits = bits(p.nanCode);
  v.below = std::ldexp(1.0f, q + 23);
  v.usable = true;
  // Checked on every code's value, the midpoints between them and both infinities, against
  // encode then decode; any difference leaves the codes' path in place.
  std::vector<float> xs(table_.begin(), table_.end());
  for (size_t c = 0; c + 1 < table_.size(); ++c) xs.push_back(0.5f * (table_[c] + table_[c + 1]));
  xs.push_back(std::numeric_limits<float>::infinity());
  xs.push_back(-std::numeric_limits<float>::infinity());
  const auto n = static_cast<int64_t>(xs.size());
  std::vector<float> viaCodes(xs.size()), got(xs.size());
  std::vector<uint8_t> wire(encodedBytes(n));
  Codec::roundTripInto(xs.data(), n, viaCodes.data(), false, wire.data());
  roundTripInto(xs.data(), n, got.data(), false, wire.data());
  v.usable = std::memcmp(viaCodes.data(), got.data(), got.size() * sizeof(float)) == 0;
#endif
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
// ValueRounding, 16 values per step, stored or added as decode's vector loops do (put16).
template <typename Source>
void FloatCodec::roundTripFrom(const Source& source, int64_t n, float* acc, bool add) const {
  const ValueRounding& v = values_;
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  const __m512i halfMinusOne = _mm512_set1_epi32(static_cast<int32_t>(v.halfMinusOne));
  const __m512i one = _mm512_set1_epi32(1), flip = _mm512_set1_epi32(static_cast<int32_t>(v.lsbFlip));
  const __m512i keep = _mm512_set1_epi32(static_cast<int32_t>(~((1u << v.shift) - 1)));
  const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(v.shift));
  const __m512 below = _mm512_set1_ps(v.below);
  const __m512i minNormal = _mm512_set1_epi32(static_cast<int32_t>(v.minNormalBits));
  const __m512i maxValue = _mm512_set1_epi32(static_cast<int32_t>(v.maxValueBits));
  const __m512i overflow = _mm512_set1_epi32(static_cast<int32_t>(v.overflowBits));
  const __m512i nan = _mm512_set1_epi32(static_cast<int32_t>(v.nanBits));
  const __m512i infinity = _mm512_set1_epi32(0x7f800000);
  const auto round16 = [&](__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i a = _mm512_and_si512(u, magnitude);
    const __m512i lsb = _mm512_xor_si512(_mm512_and_si512(_mm512_srl_epi32(a, shift), one), flip);
    const __m512i normal = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(a, halfMinusOne), lsb), keep);
    const __m512 small = _mm512_sub_ps(_mm512_add_ps(_mm512_castsi512_ps(a), below), below);
    __m512i y = _mm512_mask_mov_epi32(_mm512_castps_si512(small), _mm512_cmpge_epu32_mask(a, minNormal), normal);
    y = _mm512_mask_mov_epi32(y, _mm512_cmpgt_epu32_mask(y, maxValue), overflow);
    y = _mm512_mask_mov_epi32(y, _mm512_cmpgt_epu32_mask(a, infinity), nan);
    return _mm512_castsi512_ps(_mm512_or_si512(y, _mm512_andnot_si512(magnitude, u)));
  };
  int64_t i = 0;
  if (add) {
    for (; i + 16 <= n; i += 16) put16<true>(acc + i, round16(source.full(i)));
  } else {
    for (; i + 16 <= n; i += 16) put16<false>(acc + i, round16(source.full(i)));
  }
  if (i == n) return;
  // The last values as one masked step, as decodeBytesWith's.
  const __mmask16 lanes = firstLanes(n - i);
  const __m512 y = round16(source.part(i, n - i));
  if (add) {
    put16Masked<true>(acc + i, lanes, y);
  } else {
    put16Masked<false>(acc + i, lanes, y);
  }
}

int64_t FloatCodec::roundTripValues(const float* in, int64_t n, float* acc, bool add) const {
  struct Values {
    const float* in;
    __m512 full(int64_t i) const { return _mm512_loadu_ps(in + i); }
    __m512 part(int64_t i, int64_t k) const { return _mm512_maskz_loadu_ps(firstLanes(k), in + i); }
  };
  roundTripFrom(Values{in}, n, acc, add);
  return n;
}
#endif

bool FloatCodec::roundTripKeysInto(const uint16_t* keys, int64_t n, int shift, float* acc, bool add) const {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (!values_.usable || width_ != 1 || !bit7Symmetric_ || shift < -126 || shift > 127) return false;
  // widenSticky16 (the key as fp32's top half), then scaleByPowerOfTwo's product by a normal
  // 2^shift (none for shift 0: a copy there), in registers.
  struct Keys {
    const uint16_t* keys;
    bool scaled;
    __m512 factor;
    __m512 widen(__m256i k) const {
      const __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(k), 16));
      return scaled ? _mm512_mul_ps(x, factor) : x;
    }
    __m512 full(int64_t i) const { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys + i))); }
    __m512 part(int64_t i, int64_t k) const {
      alignas(32) uint16_t rest[16] = {};
      std::memcpy(rest, keys + i, static_cast<size_t>(k) * sizeof(uint16_t));
      return widen(_mm256_load_si256(reinterpret_cast<const __m256i*>(rest)));
    }
  };
  const Keys source{keys, shift != 0, _mm512_set1_ps(static_cast<float>(kernels::pow2Double(shift)))};
  roundTripFrom(source, n, acc, add);
  return true;
#else
  (void)keys, (void)n, (void)shift, (void)acc, (void)add;
  return false;
#endif
}

bool FloatCodec::roundsSticky16Exactly() const {
  // Half the smallest subnormal above 2^-125: a product that fp32 holds only as a subnormal
  // (where the scaling itself rounds) encodes as zero from the key as from the value.
  const FloatFormat& f = format();
  return rounding_ == RoundingMode::NearestEven && f.mantissaBits <= 5 && identityNanBits_ == 0 &&
         f.minSubnormal() >= std::ldexp(1.0f, -124);
}

void FloatCodec::roundTripInto(const float* in, int64_t n, float* acc, bool add, uint8_t* scratch,
                               const EncodeContext& ctx) const {
  int64_t done = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  // The values decode's vector loop would take (decodeNibbles16: 64 a step; decodeBytes16:
  // all, the last fewer than 16 as one masked step, where it runs); the rest through the
  // codes. Every path adds as put does, so the split changes no bit.
  if (values_.usable) {
    const int64_t vectorValues = width_ == 0 ? n / 64 * 64 : bit7Symmetric_ ? n : 0;
    done = roundTripValues(in, vectorValues, acc, add);
  }
#endif
  if (done == n) return;
  EncodeContext rest = ctx;
  rest.offset = ctx.offset + done;
  Codec::roundTripInto(in + done, n - done, acc + done, add, scratch, rest);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
// Nibble codes, 64 values per step: each byte is doubled (b b), widened to two lanes and the
// odd lane shifted right by 4; vpermps reads only an index's low four bits, so the 16-entry
// table needs no masking. Returns the count decoded (a multiple of 64).
template <bool kAdd>
int64_t FloatCodec::decodeNibbles16(const uint8_t* in, int64_t n, float* out) const {
  const __m512 table = _mm512_loadu_ps(table_.data());
  const __m512i shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i / 2));
    const __m128i halves[2] = {_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1)};
    for (int h = 0; h < 2; ++h) {
      const __m128i lo = _mm_unpacklo_epi8(halves[h], halves[h]);
      const __m128i hi = _mm_unpackhi_epi8(halves[h], halves[h]);
      const __m512i c0 = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(lo), shifts);
      const __m512i c1 = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(hi), shifts);
      put16<kAdd>(out + i + 32 * h, _mm512_permutexvar_ps(c0, table));
      put16<kAdd>(out + i + 32 * h + 16, _mm512_permutexvar_ps(c1, table));
    }
  }
  return i;
}

// Byte codes, 16 values per step: the table's first 128 entries by two-source permutes (each
// reads an index's low five bits) and blends on bits 5 and 6; bit 7 flips the result by
// `bit7Flip_` (the sign bit for 8-bit formats, nothing for narrower ones, whose table repeats).
class FloatCodec::ByteDecoder16 {
 public:
  explicit ByteDecoder16(const FloatCodec& codec) : flip_(_mm512_set1_epi32(static_cast<int32_t>(codec.bit7Flip_))) {
    for (int k = 0; k < 8; ++k) t_[k] = _mm512_loadu_ps(codec.table_.data() + 16 * k);
  }
  __m512 operator()(const uint8_t* in) const {
    const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
    const __mmask16 bit5 = _mm512_test_epi32_mask(c, _mm512_set1_epi32(32));
    const __m512 q0 =
        _mm512_mask_mov_ps(_mm512_permutex2var_ps(t_[0], c, t_[1]), bit5, _mm512_permutex2var_ps(t_[2], c, t_[3]));
    const __m512 q1 =
        _mm512_mask_mov_ps(_mm512_permutex2var_ps(t_[4], c, t_[5]), bit5, _mm512_permutex2var_ps(t_[6], c, t_[7]));
    const __m512i v = _mm512_castps_si512(_mm512_mask_mov_ps(q0, _mm512_test_epi32_mask(c, _mm512_set1_epi32(64)), q1));
    return _mm512_castsi512_ps(_mm512_mask_xor_epi32(v, _mm512_test_epi32_mask(c, _mm512_set1_epi32(128)), v, flip_));
  }

 private:
  __m512 t_[8];
  __m512i flip_;
};

#if defined(APS_HALF_BYTE_DECODE)
// Byte codes of formats that embed in fp16 (FloatCodec::HalfLayout), 16 values per step: the
// code's magnitude bits shifted into fp16's fields, one F16C conversion, a power-of-two rescale,
// the special codes at and above `patchFrom` replaced by their common value, bit 7 flipping
// the sign. Fewer instructions than ByteDecoder16's four table permutes.
class FloatCodec::HalfDecoder16 {
 public:
  explicit HalfDecoder16(const FloatCodec& codec)
      : shift_(_mm_cvtsi32_si128(codec.half_.shift)),
        scale_(_mm512_set1_ps(codec.half_.scale)),
        patch_(_mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int32_t>(codec.half_.patchBits)))),
        patchFrom_(_mm256_set1_epi16(static_cast<int16_t>(codec.half_.patchFrom))),
        flip_(_mm512_set1_epi32(static_cast<int32_t>(codec.bit7Flip_))) {}
  __m512 operator()(const uint8_t* in) const {
    const __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
    const __m256i magnitude = _mm256_and_si256(c, _mm256_set1_epi16(0x7f));
    __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_sll_epi16(magnitude, shift_)), scale_);
    v = _mm512_mask_mov_ps(v, _mm256_cmpge_epu16_mask(magnitude, patchFrom_), patch_);
    const __m512i bits = _mm512_castps_si512(v);
    return _mm512_castsi512_ps(
        _mm512_mask_xor_epi32(bits, _mm256_test_epi16_mask(c, _mm256_set1_epi16(0x80)), bits, flip_));
  }

 private:
  __m128i shift_;
  __m512 scale_, patch_;
  __m256i patchFrom_;
  __m512i flip_;
};
#endif

template <typename Decoder, bool kAdd>
int64_t FloatCodec::decodeBytesWith(const uint8_t* in, int64_t n, float* out) const {
  const Decoder decode(*this);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) put16<kAdd>(out + i, decode(in + i));
  if (i == n) return n;
  // The last codes (fewer than 16) as one masked step: every value added by the same
  // instruction, wherever a call starts or ends (at 256 ranks an owner's piece of a small
  // bucket is 46 values, and the scalar rest was most of its time). The decoders read 16
  // bytes: the rest is copied out first.
  alignas(16) uint8_t rest[16] = {};
  std::memcpy(rest, in + i, static_cast<size_t>(n - i));
  put16Masked<kAdd>(out + i, firstLanes(n - i), decode(rest));
  return n;
}

template <bool kAdd>
int64_t FloatCodec::decodeBytes16(const uint8_t* in, int64_t n, float* out) const {
  if (!bit7Symmetric_) return 0;
  // The table permutes even where the fp16 route is usable: alone, decode runs at memory speed
  // either way, and read 3-5% slower through fp16 (aps_bench_codec, 3 alternating rounds).
  return decodeBytesWith<ByteDecoder16, kAdd>(in, n, out);
}

template <typename Decoder>
int64_t FloatCodec::decodeSumBytesWith(const uint8_t* a, const uint8_t* b, int64_t n, float* out) const {
  const Decoder decode(*this);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_add_ps(decode(a + i), decode(b + i)));
  return i;
}

// out = decode(a) + decode(b), 16 values per step in registers: the fused reduction step's
// two decodes in one pass, its sums written once (the same fp32 additions as decode, then
// decodeAdd). Through fp16 where the format allows: two decodes in the compute-bound fused
// step are what made it slower than one decode plus one encode.
int64_t FloatCodec::decodeSumBytes16(const uint8_t* a, const uint8_t* b, int64_t n, float* out) const {
  if (!bit7Symmetric_) return 0;
#if defined(APS_HALF_BYTE_DECODE)
  if (half_.usable) return decodeSumBytesWith<HalfDecoder16>(a, b, n, out);
#endif
  return decodeSumBytesWith<ByteDecoder16>(a, b, n, out);
}

#if defined(APS_HALF_BYTE_DECODE)
// Whether the byte codes decode through fp16 (HalfDecoder16): magnitude m (7 bits) shifted
// left by 10 - M lands on fp16's exponent and mantissa fields, whose value times 2^(15 - bias)
// is the format's (normals and subnormals alike, for formats of up to 5 exponent and 7
// mantissa bits); the magnitudes from the first one that differs up must all decode to one
// value (the format's NaN and special codes). Checked on every code against the table, by the
// decoder itself; otherwise the table permutes decode.
void FloatCodec::probeHalfLayout() {
  const FloatFormat& f = quantizer_.format();
  if (!bit7Symmetric_ || f.exponentBits > 5 || f.mantissaBits > 7 || f.exponentBits + f.mantissaBits != 7) return;
  half_.shift = 10 - f.mantissaBits;
  half_.scale = std::ldexp(1.0f, 15 - f.bias);
  // The first magnitude whose fp16 reading differs, and the value of the codes from there up.
  half_.patchFrom = 128;
  for (uint32_t c = 0; c < 128; ++c) {
    const uint32_t bits = std::bit_cast<uint32_t>(_cvtsh_ss(static_cast<uint16_t>(c << half_.shift)) * half_.scale);
    if (bits != std::bit_cast<uint32_t>(table_[c])) {
      half_.patchFrom = c;
      half_.patchBits = std::bit_cast<uint32_t>(table_[c]);
      break;
    }
  }
  half_.usable = true;
  alignas(64) uint8_t codes[256];
  alignas(64) float got[256];
  for (uint32_t c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
  decodeBytesWith<HalfDecoder16, false>(codes, 256, got);
  for (uint32_t c = 0; c < 256 && half_.usable; ++c) {
    half_.usable = std::bit_cast<uint32_t>(got[c]) == std::bit_cast<uint32_t>(table_[c]);
  }
}
#endif
#endif

std::string FloatCodec::name() const {
  std::string n = format().name;
  if (rounding_ != RoundingMode::NearestEven) n += std::string(":") + roundingModeName(rounding_);
  return n;
}

size_t FloatCodec::encodedBytes(int64_t n) const {
  APS_ASSERT(n >= 0);
  return width_ == 0 ? static_cast<size_t>((n + 1) / 2) : static_cast<size_t>(n) * width_;
}

size_t FloatCodec::byteOffset(int64_t i) const { return width_ == 0 ? static_cast<size_t>(i / 2) : i * width_; }

void FloatCodec::encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx) const {
  if (width_ == 0) {
    quantizer_.encodeNibbles(in, out, n, rounding_, ctx);
    return;
  }
  if (width_ == 1) {
    quantizer_.encode(in, out, n, rounding_, ctx);
    return;
  }
  if (identityNanBits_ != 0) {
    encodeFp32Identity(in, n, out);
    return;
  }
  int64_t done = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (rounding_ == RoundingMode::NearestEven && (decoder_ == Decoder::Bf16 || decoder_ == Decoder::Fp16)) {
    done = decoder_ == Decoder::Bf16 ? encodeHalf32<true>(in, n, quantizer_.params(), out)
                                     : encodeHalf32<false>(in, n, quantizer_.params(), out);
  }
#endif
  // Two-byte codes straight into an output aligned for them (a wire buffer nearly always is):
  // one call, so the stochastic path keeps drawing 128 values' random bits at a time.
  if (width_ == 2 && reinterpret_cast<uintptr_t>(out + byteOffset(done)) % alignof(uint16_t) == 0) {
    EncodeContext rest = ctx;
    rest.offset = ctx.offset + done;
    quantizer_.encode(in + done, reinterpret_cast<uint16_t*>(out + byteOffset(done)), n - done, rounding_, rest);
    return;
  }
  // The rest: a chunk in a local buffer, then copied to the (unaligned) output.
  alignas(64) uint16_t codes16[kChunk];
  alignas(64) float values[kChunk];
  for (int64_t begin = done; begin < n; begin += kChunk) {
    const int64_t m = std::min(kChunk, n - begin);
    EncodeContext local = ctx;
    local.offset = ctx.offset + begin;
    uint8_t* dst = out + byteOffset(begin);
    if (width_ == 2) {
      quantizer_.encode(in + begin, codes16, m, rounding_, local);
      std::memcpy(dst, codes16, static_cast<size_t>(m) * 2);  // x86: little endian
    } else {
      quantizer_.quantize(in + begin, values, m, rounding_, local);
      std::memcpy(dst, values, static_cast<size_t>(m) * 4);
    }
  }
}

// A copy in which every NaN becomes the format's NaN with the input's sign, as the rounding
// kernel makes it: one pass at memory speed instead of the full rounding arithmetic.
void FloatCodec::encodeFp32Identity(const float* in, int64_t n, uint8_t* out) const {
  const uint32_t nan = identityNanBits_;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, in + i, 4);
    u = (u & 0x7fffffffu) > 0x7f800000u ? (u & 0x80000000u) | nan : u;
    std::memcpy(out + 4 * i, &u, 4);  // x86: little endian
  }
}

template <bool kAdd>
void FloatCodec::decodeInto(const uint8_t* in, int64_t n, float* out) const {
  switch (width_) {
    case 0: {
      int64_t done = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
      done = decodeNibbles16<kAdd>(in, n, out);
#endif
      for (int64_t i = done; i < n; ++i) put<kAdd>(out + i, table_[(in[i / 2] >> (4 * (i % 2))) & 15u]);
      return;
    }
    case 1: {
      int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
      i = decodeBytes16<kAdd>(in, n, out);
#endif
      const float* table = table_.data();
      for (; i < n; ++i) put<kAdd>(out + i, table[in[i]]);
      return;
    }
    case 2:
      decodeWide<kAdd>(in, n, out);
      return;
    default: {
      // fp32 bits (little endian): the values themselves.
      int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
      for (; i + 16 <= n; i += 16) put16<kAdd>(out + i, _mm512_loadu_ps(in + 4 * i));
      if (i < n) {
        const __mmask16 lanes = firstLanes(n - i);
        put16Masked<kAdd>(out + i, lanes, _mm512_maskz_loadu_ps(lanes, in + 4 * i));
        i = n;
      }
#endif
      for (; i < n; ++i) {
        float v;
        std::memcpy(&v, in + 4 * i, 4);
        put<kAdd>(out + i, v);
      }
      return;
    }
  }
}

template <bool kAdd>
void FloatCodec::decodeWide(const uint8_t* in, int64_t n, float* out) const {
  int64_t i = 0;
  if (decoder_ == Decoder::Bf16) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
    for (; i + 16 <= n; i += 16) {
      const __m512i c = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i)));
      put16<kAdd>(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(c, 16)));
    }
#endif
    for (; i < n; ++i) {
      uint16_t c;
      std::memcpy(&c, in + 2 * i, 2);
      put<kAdd>(out + i, std::bit_cast<float>(uint32_t{c} << 16));
    }
    return;
  }
#if defined(__F16C__)
  if (decoder_ == Decoder::Fp16) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
    for (; i + 16 <= n; i += 16) {
      put16<kAdd>(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i))));
    }
#endif
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
      if constexpr (kAdd) {  // put's add: a NaN value kept, made quiet
        const __m256 sum = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
        const __m256 quiet = _mm256_or_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000)));
        v = _mm256_blendv_ps(sum, quiet, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      }
      _mm256_storeu_ps(out + i, v);
    }
    for (; i < n; ++i) {
      uint16_t c;
      std::memcpy(&c, in + 2 * i, 2);
      put<kAdd>(out + i, _cvtsh_ss(c));
    }
    return;
  }
#endif
  const float* table = table_.data();
  for (; i < n; ++i) {
    uint16_t c;
    std::memcpy(&c, in + 2 * i, 2);
    put<kAdd>(out + i, table[c]);
  }
}

void FloatCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  if (width_ == 4) {
    std::memcpy(out, in, static_cast<size_t>(n) * 4);
    return;
  }
  decodeInto<false>(in, n, out);
}

void FloatCodec::decodeAdd(const uint8_t* in, int64_t n, float* acc) const { decodeInto<true>(in, n, acc); }

void FloatCodec::decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                                 const EncodeContext& ctx) const {
  // Chunk by chunk in L1: a decoded, b decoded and added in registers, the sums encoded. Both
  // inputs of a chunk are read before its output is written, so out may alias a or b.
  alignas(64) float sums[kChunk];
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t m = std::min(kChunk, n - begin);
    const size_t off = byteOffset(begin);
    int64_t summed = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    if (width_ == 1) summed = decodeSumBytes16(a + off, b + off, m, sums);
#endif
    decodeInto<false>(a + off + byteOffset(summed), m - summed, sums + summed);
    decodeInto<true>(b + off + byteOffset(summed), m - summed, sums + summed);
    EncodeContext local = ctx;
    local.offset = ctx.offset + begin;
    encode(sums, m, out + off, local);
  }
}

}  // namespace aps::precision
