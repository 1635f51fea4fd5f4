#pragma once

#include "framework/core/EnumNames.h"

#include <cstdint>
#include <string>

namespace aps::precision {

// How a value between two neighbours of a format is resolved.
enum class RoundingMode : uint8_t {
  NearestEven,  // IEEE 754 roundTiesToEven
  Stochastic,   // up with probability (x - lo) / (hi - lo): unbiased, E[Q(x)] = x
  TowardZero,   // truncation
};
inline constexpr EnumNames<RoundingMode, 3> kRoundingModeNames{{"nearest", "stochastic", "toward_zero"}};
static_assert(kRoundingModeNames.covers(RoundingMode::TowardZero), "one name per RoundingMode");

// "nearest" (alias "nearest_even", "rne"), "stochastic" (alias "sr"), "toward_zero"
// (alias "truncate", "rtz"); throws aps::Error naming the value otherwise.
RoundingMode parseRoundingMode(const std::string& name);
const char* roundingModeName(RoundingMode mode);

}  // namespace aps::precision
