#include "framework/tensor/HalfFloat.h"

#include <bit>

namespace aps {

uint16_t floatToHalfBits(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t absBits = f & 0x7FFFFFFFu;
  if (absBits >= 0x7F800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7C00u | (absBits > 0x7F800000u ? 0x200u : 0u));
  }
  if (absBits >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 2^16: inf
  if (absBits < 0x38800000u) {                                               // below 2^-14: subnormal half (or zero)
    // Add 0.5 (as a float) so that the FPU does the round-to-nearest-even of the mantissa.
    const float shifted = std::bit_cast<float>(absBits) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3F000000u));
  }
  const uint32_t mantOdd = (absBits >> 13) & 1u;
  uint32_t rounded = absBits + 0xC8000FFFu + mantOdd;  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

float halfBitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0) {
    // Subnormal or zero: value = mantissa * 2^-24.
    const float magnitude = static_cast<float>(mantissa) * 0x1.0p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t floatToBFloat16Bits(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb = (f >> 16) & 1u;
  return static_cast<uint16_t>((f + 0x7FFFu + lsb) >> 16);
}

float bfloat16BitsToFloat(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

}  // namespace aps
