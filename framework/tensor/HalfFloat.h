#pragma once

#include <cstdint>

namespace aps {

// IEEE 754 binary16 and bfloat16 storage conversions (round to nearest even, NaN kept
// quiet). These are storage conversions for tensors; the precision module owns the
// emulation of low-precision arithmetic.
uint16_t floatToHalfBits(float value);
float halfBitsToFloat(uint16_t bits);
uint16_t floatToBFloat16Bits(float value);
float bfloat16BitsToFloat(uint16_t bits);

}  // namespace aps
