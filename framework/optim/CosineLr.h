#pragma once

#include "framework/optim/LrSchedule.h"

namespace aps::optim {

// Cosine annealing (Loshchilov & Hutter 2017, SGDR without restarts):
// minLr + (base - minLr) * (1 + cos(pi * step / totalSteps)) / 2; minLr after totalSteps.
class CosineLr : public LrSchedule {
 public:
  CosineLr(double base, int64_t totalSteps, double minLr = 0.0);
  double lr(int64_t step) const override;

 private:
  double base_;
  int64_t totalSteps_;
  double minLr_;
};

}  // namespace aps::optim
