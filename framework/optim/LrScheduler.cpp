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
  const Tensor* t = findTensor(state, "schedule_step");
  APS_CHECK(t != nullptr, "LrScheduler: state has no 'schedule_step' entry");
  APS_CHECK(t->dtype() == DType::Int64 && t->numel() == 1, "LrScheduler: 'schedule_step' must be one int64");
  step_ = t->toVector<int64_t>()[0];
}

}  // namespace aps::optim
