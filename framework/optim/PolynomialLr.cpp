#include "framework/optim/PolynomialLr.h"

#include "framework/core/Error.h"

#include <algorithm>
#include <cmath>

namespace aps::optim {

PolynomialLr::PolynomialLr(double base, int64_t totalSteps, double power, double endLr)
    : base_(base), totalSteps_(totalSteps), power_(power), endLr_(endLr) {
  APS_CHECK(totalSteps >= 1, "PolynomialLr: total steps must be >= 1, got {}", totalSteps);
  APS_CHECK(power > 0.0, "PolynomialLr: power must be > 0, got {}", power);
}

double PolynomialLr::lr(int64_t step) const {
  if (step >= totalSteps_) return endLr_;
  const double t = static_cast<double>(std::max<int64_t>(step, 0)) / static_cast<double>(totalSteps_);
  return endLr_ + (base_ - endLr_) * std::pow(1.0 - t, power_);
}

}  // namespace aps::optim
