#pragma once

#include "framework/optim/LrSchedule.h"

#include <cstdint>
#include <vector>

namespace aps::optim {

// base * gamma^(number of milestones <= step) (torch MultiStepLR), e.g. x0.1 at 40 and 80.
class MultiStepLr : public LrSchedule {
 public:
  MultiStepLr(double base, std::vector<int64_t> milestones, double gamma);
  double lr(int64_t step) const override;

 private:
  double base_;
  std::vector<int64_t> milestones_;
  double gamma_;
};

}  // namespace aps::optim
