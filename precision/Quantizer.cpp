#include "precision/Quantizer.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/core/Rng.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

namespace aps::precision {

namespace {

constexpr int64_t kChunk = 512;  // random bits are drawn per chunk of this many values

// The rounding core, for one value; written without branches so that loops over it
// vectorise. With x = sig * 2^(e - 150) (sig the 24-bit significand of fp32) and the
// format's quantum 2^qexp at x's binade (max(ex, emin) - M, or 2^emin below the smallest
// normal when subnormals are off), drop d = qexp - (e - 150) bits: r = sig >> d, and the
// dropped fraction as 32 bits, frac = (sig mod 2^d) * 2^(32 - d). Rounding adds 1 to r
// when frac > 1/2 (or == 1/2 and r odd) for nearest-even, when frac + random carries out
// of 32 bits for stochastic (P = frac / 2^32, exactly the distance to r for d <= 32).
template <RoundingMode kMode, bool kValue, bool kCode>
inline void roundOne(float x, uint32_t rnd, const Quantizer::Params& p, float& value, uint32_t& code) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u & 0x7fffffffu;
  const int32_t fe = static_cast<int32_t>(a >> 23);
  const int32_t eEff = fe > 0 ? fe : 1;
  const uint32_t sig = (a & 0x7fffffu) | (fe > 0 ? 0x800000u : 0u);
  const int32_t ex = eEff - 127;
  const bool below = ex < p.minExponent;
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
  }
  r += up;
  const bool isNan = a > 0x7f800000u;
  if constexpr (kValue) {
    // r * 2^qexp exactly: r < 2^25 converts exactly, 2^qexp >= 2^-149 is an fp32 value.
    const uint32_t qbits = qexp >= -126 ? static_cast<uint32_t>(qexp + 127) << 23 : 1u << ((qexp + 149) & 31);
    float y = static_cast<float>(static_cast<int32_t>(r)) * std::bit_cast<float>(qbits);
    y = y > p.maxValue ? p.overflowValue : y;
    y = isNan ? p.nanValue : y;
    value = std::bit_cast<float>(std::bit_cast<uint32_t>(y) | sign);
  }
  if constexpr (kCode) {
    const uint32_t base = below ? 0u : static_cast<uint32_t>(ex + p.biasMinusOne) << p.mantissaBits;
    uint32_t mag = base + ((below && !p.subnormals) ? (r << p.mantissaBits) : r);
    mag = mag > p.maxFiniteCode ? p.overflowCode : mag;
    mag = isNan ? p.nanCode : mag;
    code = mag | (sign >> p.signShift);
  }
}

template <RoundingMode kMode, typename CodeT>
void kernel(const float* in, int64_t n, const uint32_t* rnd, const Quantizer::Params& p, float* values, CodeT* codes) {
  const Quantizer::Params q = p;  // a local copy: no aliasing with the outputs
  if (values) {
    for (int64_t i = 0; i < n; ++i) {
      float v;
      uint32_t c;
      roundOne<kMode, true, false>(in[i], kMode == RoundingMode::Stochastic ? rnd[i] : 0u, q, v, c);
      values[i] = v;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      float v;
      uint32_t c;
      roundOne<kMode, false, true>(in[i], kMode == RoundingMode::Stochastic ? rnd[i] : 0u, q, v, c);
      codes[i] = static_cast<CodeT>(c);
    }
  }
}

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
        for (int64_t i = 0; i < m; ++i) {
          rnd[i] = randomBits32(ctx.seed, ctx.stream, static_cast<uint64_t>(ctx.offset + begin + i));
        }
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
  params_.maxValue = format_.maxValue();
  params_.overflowValue = format_.decode(params_.overflowCode);
  params_.nanValue = format_.decode(params_.nanCode);
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
