#include "framework/numerics/RoundingMode.h"

#include "framework/core/Error.h"

namespace aps::precision {

RoundingMode parseRoundingMode(const std::string& name) {
  if (const auto mode = kRoundingModeNames.find(name)) return *mode;
  if (name == "nearest_even" || name == "rne") return RoundingMode::NearestEven;
  if (name == "sr") return RoundingMode::Stochastic;
  if (name == "truncate" || name == "rtz") return RoundingMode::TowardZero;
  APS_FAIL("rounding = '{}' is unknown ({})", name, kRoundingModeNames.list());
}

const char* roundingModeName(RoundingMode mode) { return kRoundingModeNames.name(mode).data(); }

}  // namespace aps::precision
