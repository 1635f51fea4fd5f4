#pragma once

#include "framework/core/EnumNames.h"

#include <cstdint>

namespace aps::precision {

// The number format a tensor's values are kept in when training computes in 16 bits
// (precision.compute). Values stay in float32 storage on the CPU; a tensor "in" Fp16 or
// BFloat16 holds only values exactly representable in that format (IEEE 754 binary16 with
// subnormals, inf and NaN; bfloat16 = the top 16 bits of binary32).
enum class ComputeFormat : uint8_t { Fp32, Fp16, BFloat16 };
inline constexpr EnumNames<ComputeFormat, 3> kComputeFormatNames{{"fp32", "fp16", "bf16"}};
static_assert(kComputeFormatNames.covers(ComputeFormat::BFloat16), "one name per ComputeFormat");

const char* computeFormatName(ComputeFormat format);  // "fp32", "fp16", "bf16"

}  // namespace aps::precision
