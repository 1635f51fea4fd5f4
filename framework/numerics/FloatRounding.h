#pragma once

// The scalar arithmetic of float formats, shared by the CPU codecs (Quantizer, FloatCodec,
// FormatRounding, BlockScaledCodec) and the CUDA codecs (precision/cuda/CodecKernels.cu). It
// lives below the engine (framework/numerics, the aps_numerics library), which rounds op
// outputs with it, so that the engine does not link the wire's codecs (aps_precision):
// rounding fp32 to a format in each RoundingMode (value and code), decoding a code back to
// fp32, and the fp16/bf16 nearest-even roundings of the compute emulation. Everything is
// integer bit manipulation (or, for fp16, one float add and subtract that IEEE arithmetic
// defines exactly), so CPU and GPU give the same bits whatever their FTZ/DAZ modes.

#include "framework/core/HostDevice.h"
#include "framework/numerics/ComputeFormat.h"
#include "framework/numerics/RoundingMode.h"

#include <cstdint>

namespace aps::precision::kernels {

// Number of leading zero bits of a nonzero 32-bit word.
APS_HOST_DEVICE inline int32_t leadingZeros32(uint32_t x) {
#if APS_DEVICE_CODE
  return __clz(static_cast<int>(x));
#else
  return std::countl_zero(x);
#endif
}

// Everything the rounding core needs, precomputed from the FloatFormat on the host
// (Quantizer's constructor) and passed to kernels by value.
struct RoundingParams {
  int32_t mantissaBits;
  int32_t minExponent;
  int32_t biasMinusOne;
  int32_t subnormals;  // 0 or 1
  uint32_t maxFiniteCode;
  uint32_t overflowCode;       // magnitude code for overflow (max finite, inf or NaN)
  uint32_t nanCode;            // magnitude code NaN inputs get
  uint32_t signShift;          // 31 - (E + M)
  uint32_t maxValueBits;       // fp32 bits of the largest finite value
  uint32_t overflowValueBits;  // fp32 bits of |overflow result|: max, inf or NaN
  uint32_t nanValueBits;       // fp32 bits of what NaN inputs become (NaN, or max without NaN)
};

// The rounding core, for one value (the reference for Quantizer's AVX2 kernel, which does the
// same in eight lanes). With x = sig * 2^(e - 150) (sig the 24-bit significand of fp32) and
// the format's quantum 2^qexp at x's binade (max(ex, emin) - M, or 2^emin below the smallest
// normal when subnormals are off), drop d = qexp - (e - 150) bits: r = sig >> d, and the
// dropped fraction as 32 bits, frac = (sig mod 2^d) * 2^(32 - d). Rounding adds 1 to r when
// frac > 1/2 (or == 1/2 and r odd) for nearest-even, when frac + random carries out of 32
// bits for stochastic (P = frac / 2^32, exactly the distance to r for d <= 32).
template <RoundingMode kMode, bool kValue, bool kCode>
APS_HOST_DEVICE inline void roundOne(float x, uint32_t rnd, const RoundingParams& p, float& value, uint32_t& code) {
  const uint32_t u = bitCast<uint32_t>(x);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u & 0x7fffffffu;
  const int32_t fe = static_cast<int32_t>(a >> 23);
  const int32_t eEff = fe > 0 ? fe : 1;
  const uint32_t sig = (a & 0x7fffffu) | (fe > 0 ? 0x800000u : 0u);
  const int32_t ex = eEff - 127;
  const bool below = ex < p.minExponent || fe == 0;  // fp32 subnormals sit below 2^-126 <= 2^emin
  const int32_t exC = below ? p.minExponent : ex;
  const int32_t qexp = (below && !p.subnormals) ? p.minExponent : exC - p.mantissaBits;
  int32_t d = qexp - (eEff - 150);  // >= 0 since mantissaBits <= 23
  d = d < 63 ? d : 63;
  const uint32_t r0 = sig >> (d < 31 ? d : 31);
  // d == 0: nothing dropped; 1..32: the low d bits moved to the top; > 32: sig is itself
  // below 2^-8 of the fraction's unit, keep its top bits.
  const int32_t leftShift = (d >= 1 && d <= 31) ? 32 - d : 0;
  const int32_t rightShift = d > 32 ? (d - 32 < 31 ? d - 32 : 31) : 0;
  uint32_t frac = d <= 32 ? sig << leftShift : sig >> rightShift;
  frac = d == 0 ? 0u : frac;
  uint32_t r = r0;
  uint32_t up = 0;
  if constexpr (kMode == RoundingMode::NearestEven) {
    // "Even" is the code's last bit: r's for M >= 1; for M == 0 the exponent field's
    // (every significand is 1, so ties go to the even exponent).
    const uint32_t odd = (r + (p.mantissaBits == 0 && !below ? static_cast<uint32_t>(ex + p.biasMinusOne) : 0u)) & 1u;
    up = (frac > 0x80000000u || (frac == 0x80000000u && odd)) ? 1u : 0u;
  } else if constexpr (kMode == RoundingMode::Stochastic) {
    up = (frac + rnd) < frac ? 1u : 0u;
  } else {
    (void)rnd;
  }
  r += up;
  const bool isNan = a > 0x7f800000u;
  if constexpr (kValue) {
    // The fp32 bits of r * 2^qexp, with integer operations only (so FTZ/DAZ modes cannot
    // change the result): int -> float of r (exact, r <= 2^24), then add qexp to the
    // exponent field; results below 2^-126 are fp32 subnormals, whose bits are linear:
    // r * 2^(qexp + 149).
    const uint32_t fr = bitCast<uint32_t>(static_cast<float>(static_cast<int32_t>(r)));
    const int32_t e = static_cast<int32_t>(fr >> 23) - 127 + qexp;
    uint32_t y = e < -126 ? r << ((qexp + 149) & 31) : fr + (static_cast<uint32_t>(qexp) << 23);
    y = e > 127 ? 0x7f800000u : y;
    y = r == 0 ? 0u : y;
    y = y > p.maxValueBits ? p.overflowValueBits : y;
    y = isNan ? p.nanValueBits : y;
    value = bitCast<float>(y | sign);
  }
  if constexpr (kCode) {
    const uint32_t base = below ? 0u : static_cast<uint32_t>(ex + p.biasMinusOne) << p.mantissaBits;
    uint32_t mag = base + ((below && !p.subnormals) ? (r << p.mantissaBits) : r);
    mag = mag > p.maxFiniteCode ? p.overflowCode : mag;
    mag = isNan ? p.nanCode : mag;
    code = mag | (sign >> p.signShift);
  }
}

// roundOne with the mode chosen at run time: the rounded value, or its code.
APS_HOST_DEVICE inline float roundValue(float x, RoundingMode mode, uint32_t rnd, const RoundingParams& p) {
  float v = 0.0f;
  uint32_t c = 0;
  if (mode == RoundingMode::Stochastic) {
    roundOne<RoundingMode::Stochastic, true, false>(x, rnd, p, v, c);
  } else if (mode == RoundingMode::TowardZero) {
    roundOne<RoundingMode::TowardZero, true, false>(x, rnd, p, v, c);
  } else {
    roundOne<RoundingMode::NearestEven, true, false>(x, rnd, p, v, c);
  }
  return v;
}

APS_HOST_DEVICE inline uint32_t roundCode(float x, RoundingMode mode, uint32_t rnd, const RoundingParams& p) {
  float v = 0.0f;
  uint32_t c = 0;
  if (mode == RoundingMode::Stochastic) {
    roundOne<RoundingMode::Stochastic, false, true>(x, rnd, p, v, c);
  } else if (mode == RoundingMode::TowardZero) {
    roundOne<RoundingMode::TowardZero, false, true>(x, rnd, p, v, c);
  } else {
    roundOne<RoundingMode::NearestEven, false, true>(x, rnd, p, v, c);
  }
  return c;
}

// How codes decode (precomputed from the FloatFormat on the host, codeDecodeParams in
// precision/Quantizer.h).
struct CodeDecodeParams {
  enum Layout : int32_t {
    Generic = 0,  // FloatFormat::decode: every NaN code reads as the canonical quiet NaN, signed
    Bf16 = 1,     // the code is the top half of the fp32 bits (NaN payloads kept)
    Fp16 = 2,     // IEEE binary16 as the x86 F16C conversion reads it: NaN payloads kept, made quiet
  };
  int32_t layout;
  int32_t exponentBits;
  int32_t mantissaBits;
  int32_t bias;
  int32_t subnormals;  // 0: codes with a zero exponent field read as zero
  int32_t specials;    // Specials: 0 Ieee, 1 Ocp, 2 None
  uint32_t nanCode;    // magnitude bits of the Ocp NaN
};

// fp32 bits of sig * 2^exp for a value fp32 holds exactly (sig < 2^24, nonzero).
APS_HOST_DEVICE inline uint32_t exactFloatBits(uint32_t sig, int32_t exp) {
  const int32_t top = 31 - leadingZeros32(sig);    // sig's leading bit, <= 23
  const int32_t e = top + exp;                     // the value's binade
  if (e < -126) return sig << ((exp + 149) & 31);  // fp32 subnormal: linear bits
  return (static_cast<uint32_t>(e + 127) << 23) | ((sig << (23 - top)) & 0x7fffffu);
}

// The value of one code (any code: finite, inf or NaN).
APS_HOST_DEVICE inline float decodeCode(uint32_t code, const CodeDecodeParams& p) {
  if (p.layout == CodeDecodeParams::Bf16) return bitCast<float>((code & 0xffffu) << 16);
  const uint32_t signBit = 1u << (p.exponentBits + p.mantissaBits);
  const uint32_t sign = (code & signBit) != 0 ? 0x80000000u : 0u;
  const uint32_t mag = code & (signBit - 1);
  const uint32_t field = mag >> p.mantissaBits;
  const uint32_t mant = mag & ((1u << p.mantissaBits) - 1);
  uint32_t bits = 0;
  if (p.specials == 0 && field == (1u << p.exponentBits) - 1) {
    bits = mant == 0 ? 0x7f800000u : 0x7fc00000u;
    if (p.layout == CodeDecodeParams::Fp16 && mant != 0) bits |= mant << 13;
  } else if (p.specials == 1 && mag == p.nanCode) {
    bits = 0x7fc00000u;
  } else if (field == 0) {
    bits = (p.subnormals && mant != 0) ? exactFloatBits(mant, 1 - p.bias - p.mantissaBits) : 0u;
  } else {
    bits = exactFloatBits(mant | (1u << p.mantissaBits), static_cast<int32_t>(field) - p.bias - p.mantissaBits);
  }
  return bitCast<float>(bits | sign);
}

// binary16 nearest-even (the compute emulation's, framework/numerics/FormatRounding.h): adding and
// subtracting 2^23 times the grid step makes the FPU round |x| to a multiple of that step (the
// sum lies in a binade whose float32 spacing is exactly the step, and the subtraction is
// exact). The step is 2^(e - 10) for normal halves and 2^-24 below 2^-14 (subnormals).
// |x| >= 65520 rounds past 65504 to inf (IEEE 754).
APS_HOST_DEVICE inline float roundFp16(float x) {
  const uint32_t bits = bitCast<uint32_t>(x);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  const uint32_t exponent = magnitude >> 23;
  const uint32_t stepExponent = (exponent > 113u ? exponent : 113u) - 10u;  // biased; 113 = 2^-14
  const float magic = bitCast<float>(((stepExponent + 23u) & 0xFFu) << 23);
  const float v = bitCast<float>(magnitude);
  uint32_t rounded = bitCast<uint32_t>((v + magic) - magic);
  rounded = magnitude >= 0x477FF000u ? 0x7F800000u : rounded;  // 65520 and above (inf too)
  rounded = magnitude > 0x7F800000u ? 0x7FC00000u : rounded;   // NaN: canonical quiet NaN
  return bitCast<float>(sign | rounded);
}

// bfloat16 nearest-even on the bits: add half an ulp minus one plus the kept lsb, truncate.
APS_HOST_DEVICE inline float roundBf16(float x) {
  const uint32_t bits = bitCast<uint32_t>(x);
  const uint32_t lsb = (bits >> 16) & 1u;
  uint32_t rounded = (bits + 0x7FFFu + lsb) & 0xFFFF0000u;
  rounded = (bits & 0x7FFFFFFFu) > 0x7F800000u ? ((bits | 0x00400000u) & 0xFFFF0000u) : rounded;  // NaN stays quiet
  return bitCast<float>(rounded);
}

// The RoundingParams of IEEE binary16 and bfloat16 (subnormals, overflow to inf), what
// Quantizer builds from FloatFormat::preset("fp16") and ("bf16") (tests/precision/
// RoundingAgreementTest.cpp compares them): the compute emulation's stochastic rounding uses
// them without the wire's format machinery.
APS_HOST_DEVICE inline RoundingParams sixteenBitParams(ComputeFormat format) {
  if (format == ComputeFormat::BFloat16) {
    return {7, -126, 126, 1, 0x7f7fu, 0x7f80u, 0x7fc0u, 16, 0x7f7f0000u, 0x7f800000u, 0x7fc00000u};
  }
  return {10, -14, 14, 1, 0x7bffu, 0x7c00u, 0x7e00u, 16, 0x477fe000u, 0x7f800000u, 0x7fc00000u};
}

}  // namespace aps::precision::kernels
