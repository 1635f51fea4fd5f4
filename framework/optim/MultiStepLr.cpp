#include "framework/optim/MultiStepLr.h"

#include "framework/core/Error.h"

#include <algorithm>
#include <cmath>

namespace aps::optim {

MultiStepLr::MultiStepLr(double base, std::vector<int64_t> milestones, double gamma)
    : base_(base), milestones_(std::move(milestones)), gamma_(gamma) {
  APS_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()), "MultiStepLr: milestones must be increasing");
}

double MultiStepLr::lr(int64_t step) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin();
  return base_ * std::pow(gamma_, static_cast<double>(passed));
}

}  // namespace aps::optim
