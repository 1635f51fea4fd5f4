#pragma once

#include "framework/optim/LrSchedule.h"
#include "framework/optim/Optimizer.h"
#include "framework/tensor/NamedTensor.h"
#include "framework/tensor/Stateful.h"

#include <memory>

namespace aps::optim {

// Drives an optimizer's learning rate from a schedule. Its whole state is the step, saved as
// an int64 0-d tensor "schedule_step" so checkpoints resume the schedule exactly.
class LrScheduler : public Stateful {
 public:
  LrScheduler(std::shared_ptr<const LrSchedule> schedule, Optimizer& optimizer);
  // Sets the optimizer's rate for the current step (call before optimizer.step()).
  double apply();
  // Advances to the next step.
  void advance() { ++step_; }
  int64_t step() const { return step_; }

  NamedTensors stateDict() const override;
  void loadStateDict(const NamedTensors& state) override;

 private:
  std::shared_ptr<const LrSchedule> schedule_;
  Optimizer& optimizer_;
  int64_t step_ = 0;
};

}  // namespace aps::optim
