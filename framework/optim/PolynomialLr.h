#pragma once

#include "framework/optim/LrSchedule.h"

#include <cstdint>
#include <vector>

namespace aps::optim {

// Polynomial decay (as in You et al.'s LARS experiments): endLr + (base - endLr) *
// (1 - step / totalSteps)^power; endLr after totalSteps.
class PolynomialLr : public LrSchedule {
 public:
  PolynomialLr(double base, int64_t totalSteps, double power = 2.0, double endLr = 0.0);
  double lr(int64_t step) const override;

 private:
  double base_;
  int64_t totalSteps_;
  double power_, endLr_;
};

}  // namespace aps::optim
