#pragma once

#include "framework/optim/LrSchedule.h"

#include <cstdint>
#include <vector>

namespace aps::optim {

// A fixed rate.
class ConstantLr : public LrSchedule {
 public:
  explicit ConstantLr(double base) : base_(base) {}
  double lr(int64_t) const override { return base_; }

 private:
  double base_;
};

}  // namespace aps::optim
