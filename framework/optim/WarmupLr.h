#pragma once

#include "framework/optim/LrSchedule.h"

#include <memory>

namespace aps::optim {

// Linear warm-up (Goyal et al. 2017, "Accurate, Large Minibatch SGD"): for step < warmupSteps
// the rate rises linearly from startLr to the inner schedule's rate; from warmupSteps on it
// is the inner schedule at the same (absolute) step, so milestones keep their meaning.
class WarmupLr : public LrSchedule {
 public:
  WarmupLr(std::shared_ptr<const LrSchedule> inner, int64_t warmupSteps, double startLr);
  double lr(int64_t step) const override;

 private:
  std::shared_ptr<const LrSchedule> inner_;
  int64_t warmupSteps_;
  double startLr_;
};

}  // namespace aps::optim
