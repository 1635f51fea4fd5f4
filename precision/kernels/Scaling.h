#pragma once

// The scale arithmetic shared by the CPU and CUDA codecs: a block's largest magnitude, the
// power-of-two scaling of BlockScaledCodec (its E8M0 scale byte per block) and of APS
// (ApsScaler's per-layer exponent), with integer operations and one exactly defined
// double multiply, so CPU and GPU agree bit for bit.

#include "framework/core/HostDevice.h"
#include "framework/numerics/FloatRounding.h"

#include <cstdint>

namespace aps::precision::kernels {

// |x| as fp32 bits. Unsigned order of these bits is the order of magnitudes with every NaN
// above inf above the finite values, so a block's integer max is its largest magnitude, or
// non-finite (> 0x7f7fffff) when the block holds inf or NaN.
APS_HOST_DEVICE inline uint32_t absBits(float x) { return bitCast<uint32_t>(x) & 0x7fffffffu; }

inline constexpr uint32_t kMaxFiniteBits = 0x7f7fffffu;

// floor(log2(m)) of a positive finite magnitude given by its fp32 bits (subnormals too).
APS_HOST_DEVICE inline int32_t floorLog2Bits(uint32_t bits) {
  const int32_t fe = static_cast<int32_t>(bits >> 23);
  if (fe > 0) return fe - 127;
  return (31 - leadingZeros32(bits & 0x7fffffu)) - 149;
}

// 2^shift as a double, exactly (shift clamped to [-1100, 1100]: 0 below 2^-1074, inf above
// 2^1023), as std::ldexp(1.0, shift) gives it.
APS_HOST_DEVICE inline double pow2Double(int32_t shift) {
  shift = shift < -1100 ? -1100 : (shift > 1100 ? 1100 : shift);
  if (shift > 1023) return bitCast<double>(uint64_t{0x7ff} << 52);
  if (shift >= -1022) return bitCast<double>(static_cast<uint64_t>(shift + 1023) << 52);
  if (shift >= -1074) return bitCast<double>(uint64_t{1} << (shift + 1074));
  return 0.0;
}

// x * 2^shift with a single rounding (exact unless the result is an fp32 subnormal or
// overflows): computed in double, where 2^shift and the product are exact. shift 0 is x itself.
// A NaN comes back quiet with its sign and payload, as x86's conversions and product keep it
// (a GPU's give its canonical NaN).
APS_HOST_DEVICE inline float scaleByPow2(float x, int32_t shift) {
  if (shift == 0) return x;
  return nanAsX86(static_cast<float>(static_cast<double>(x) * pow2Double(shift)), x, x);
}

// BlockScaledCodec: the E8M0 scale code of a block whose largest magnitude has fp32 bits
// `amaxBits`: 2^(floor(log2(amax)) - emax), the exponent clamped to [-127, 127], biased by 127;
// 255 (NaN) for inf or NaN, 127 (2^0) for an all-zero block.
inline constexpr int32_t kScaleBias = 127;
inline constexpr uint32_t kNanScale = 255;

APS_HOST_DEVICE inline uint32_t blockScaleCode(uint32_t amaxBits, int32_t emax) {
  if (amaxBits > kMaxFiniteBits) return kNanScale;
  if (amaxBits == 0) return kScaleBias;
  int32_t e = floorLog2Bits(amaxBits) - emax;
  e = e < -kScaleBias ? -kScaleBias : (e > kScaleBias ? kScaleBias : e);
  return static_cast<uint32_t>(e + kScaleBias);
}

// The value a block element is rounded from (x / scale; 0 in a NaN-scaled block, whose
// elements carry nothing), and the value an element decodes to (v * scale; NaN in such a block).
APS_HOST_DEVICE inline float blockScaledInput(float x, uint32_t scaleCode) {
  return scaleCode == kNanScale ? 0.0f : scaleByPow2(x, kScaleBias - static_cast<int32_t>(scaleCode));
}

APS_HOST_DEVICE inline float blockScaledOutput(float v, uint32_t scaleCode) {
  return scaleCode == kNanScale ? bitCast<float>(0x7fc00000u)
                                : scaleByPow2(v, static_cast<int32_t>(scaleCode) - kScaleBias);
}

// APS (ApsScaler::localExponents): a layer's exponent ceil(log2(N * max|g|)) from the fp32 bits
// of max|g|: +inf when non-finite, kApsZeroExponent for an all-zero layer. Exactly, in integers:
// max|g| = sig * 2^e with sig < 2^24, so N * sig < 2^53 and ceil(log2(N * sig * 2^e)) =
// e + ceil(log2(N * sig)) = e + 64 - clz(N * sig - 1).
inline constexpr float kApsZeroExponent = -1.0e9f;

APS_HOST_DEVICE inline float apsExponent(uint32_t maxBits, int32_t worldSize) {
  if (maxBits > kMaxFiniteBits) return bitCast<float>(0x7f800000u);
  if (maxBits == 0) return kApsZeroExponent;
  const int32_t fe = static_cast<int32_t>(maxBits >> 23);
  const uint64_t sig = (maxBits & 0x7fffffu) | (fe > 0 ? 0x800000u : 0u);
  const int32_t e = (fe > 0 ? fe : 1) - 150;
  const uint64_t product = sig * static_cast<uint64_t>(worldSize) - 1;
  const uint32_t hi = static_cast<uint32_t>(product >> 32);
  const int32_t lz =
      product == 0 ? 64 : (hi != 0 ? leadingZeros32(hi) : 32 + leadingZeros32(static_cast<uint32_t>(product)));
  return static_cast<float>(e + 64 - lz);
}

}  // namespace aps::precision::kernels
