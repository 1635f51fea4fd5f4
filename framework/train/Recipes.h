#pragma once

#include "framework/tensor/NamedTensor.h"
#include "framework/train/Config.h"

#include <cstdint>
#include <memory>

namespace aps::optim {
class Optimizer;
class LrSchedule;
}  // namespace aps::optim

namespace aps::train {

// The peak learning rate: optimizer.lr, times global batch / schedule.base_batch when
// schedule.scale_with_batch (the linear scaling rule).
double peakLearningRate(const TrainConfig& config, int worldSize);

// The optimizer of `config.optimizer` (sgd, nesterov, lars, adamw) over `params` at `lr`.
std::unique_ptr<optim::Optimizer> makeOptimizer(const TrainConfig& config, const NamedTensors& params, double lr);

// The schedule of `config.schedule` (constant, step, multistep, cosine, poly; epochs turned
// into steps with `stepsPerEpoch`), behind a linear warm-up when schedule.warmup_epochs > 0.
std::shared_ptr<const optim::LrSchedule> makeSchedule(const TrainConfig& config, double lr, int64_t stepsPerEpoch,
                                                      int64_t totalSteps);

}  // namespace aps::train
