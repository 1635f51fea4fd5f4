#include "framework/optim/StepLr.h"

#include "framework/core/Error.h"

#include <cmath>

namespace aps::optim {

StepLr::StepLr(double base, int64_t stepSize, double gamma) : base_(base), stepSize_(stepSize), gamma_(gamma) {
  APS_CHECK(stepSize >= 1, "StepLr: step size must be >= 1, got {}", stepSize);
}

double StepLr::lr(int64_t step) const { return base_ * std::pow(gamma_, static_cast<double>(step / stepSize_)); }

}  // namespace aps::optim
