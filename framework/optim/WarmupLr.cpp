#include "framework/optim/WarmupLr.h"

#include "framework/core/Error.h"

#include <algorithm>

namespace aps::optim {

WarmupLr::WarmupLr(std::shared_ptr<const LrSchedule> inner, int64_t warmupSteps, double startLr)
    : inner_(std::move(inner)), warmupSteps_(warmupSteps), startLr_(startLr) {
  APS_CHECK(inner_ != nullptr, "WarmupLr: no schedule to warm up into");
  APS_CHECK(warmupSteps >= 0, "WarmupLr: warm-up steps must be >= 0, got {}", warmupSteps);
}

double WarmupLr::lr(int64_t step) const {
  const double target = inner_->lr(step);
  if (step >= warmupSteps_) return target;
  const double t = static_cast<double>(std::max<int64_t>(step, 0)) / static_cast<double>(warmupSteps_);
  return startLr_ + (target - startLr_) * t;
}

}  // namespace aps::optim
