#include "framework/optim/CosineLr.h"

#include "framework/core/Error.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace aps::optim {

CosineLr::CosineLr(double base, int64_t totalSteps, double minLr)
    : base_(base), totalSteps_(totalSteps), minLr_(minLr) {
  APS_CHECK(totalSteps >= 1, "CosineLr: total steps must be >= 1, got {}", totalSteps);
}

double CosineLr::lr(int64_t step) const {
  if (step >= totalSteps_) return minLr_;
  const double t = static_cast<double>(std::max<int64_t>(step, 0)) / static_cast<double>(totalSteps_);
  return minLr_ + (base_ - minLr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
}

}  // namespace aps::optim
