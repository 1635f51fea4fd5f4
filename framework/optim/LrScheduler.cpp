#include "framework/optim/LrScheduler.h"

#include "framework/core/Error.h"

namespace aps::optim {

LrScheduler::LrScheduler(std::shared_ptr<const LrSchedule> schedule, Optimizer& optimizer)
    : schedule_(std::move(schedule)), optimizer_(optimizer) {
  APS_CHECK(schedule_ != nullptr, "LrScheduler: no schedule");
}

double LrScheduler::apply() {
  const double lr = schedule_->lr(step_);
  optimizer_.setLr(lr);
  return lr;
}

NamedTensors LrScheduler::stateDict() const {
  Tensor t = Tensor::zeros({}, DType::Int64);
  t.data<int64_t>()[0] = step_;
  return {{"schedule_step", t}};
}

void LrScheduler::loadStateDict(const NamedTensors& state) {
  for (const auto& entry : state) {
    if (entry.name != "schedule_step") continue;
    APS_CHECK(entry.tensor.dtype() == DType::Int64 && entry.tensor.numel() == 1,
              "LrScheduler: 'schedule_step' must be one int64");
    step_ = entry.tensor.toVector<int64_t>()[0];
    return;
  }
  APS_FAIL("LrScheduler: state has no 'schedule_step' entry");
}

}  // namespace aps::optim
