#pragma once

#include "framework/optim/LrSchedule.h"

namespace aps::optim {

// base * gamma^floor(step / stepSize) (torch StepLR).
class StepLr : public LrSchedule {
 public:
  StepLr(double base, int64_t stepSize, double gamma);
  double lr(int64_t step) const override;

 private:
  double base_;
  int64_t stepSize_;
  double gamma_;
};

}  // namespace aps::optim
