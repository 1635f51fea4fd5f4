#include "precision/RoundingMode.h"

#include "framework/core/Error.h"

namespace aps::precision {

RoundingMode parseRoundingMode(const std::string& name) {
  if (name == "nearest" || name == "nearest_even" || name == "rne") return RoundingMode::NearestEven;
  if (name == "stochastic" || name == "sr") return RoundingMode::Stochastic;
  if (name == "toward_zero" || name == "truncate" || name == "rtz") return RoundingMode::TowardZero;
  APS_FAIL("rounding = '{}' is unknown (nearest, stochastic, toward_zero)", name);
}

const char* roundingModeName(RoundingMode mode) {
  switch (mode) {
    case RoundingMode::NearestEven:
      return "nearest";
    case RoundingMode::Stochastic:
      return "stochastic";
    case RoundingMode::TowardZero:
      return "toward_zero";
  }
  return "?";
}

}  // namespace aps::precision
