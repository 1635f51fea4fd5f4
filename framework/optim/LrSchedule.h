#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace aps::optim {

// A learning-rate schedule: the rate as a pure function of the step (iteration or epoch, as
// the caller counts), so resuming needs nothing but the step (see LrScheduler).
class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double lr(int64_t step) const = 0;
};

}  // namespace aps::optim
