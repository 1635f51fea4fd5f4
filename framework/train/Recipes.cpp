#include "framework/train/Recipes.h"

#include "framework/optim/AdamW.h"
#include "framework/optim/ConstantLr.h"
#include "framework/optim/CosineLr.h"
#include "framework/optim/Lars.h"
#include "framework/optim/MultiStepLr.h"
#include "framework/optim/PolynomialLr.h"
#include "framework/optim/Sgd.h"
#include "framework/optim/StepLr.h"
#include "framework/optim/WarmupLr.h"

#include <cmath>

namespace aps::train {

double peakLearningRate(const TrainConfig& config, int worldSize) {
  const int64_t globalBatch = config.data.batchSize * config.optimizer.accumulationSteps * worldSize;
  return config.optimizer.lr * (config.schedule.scaleWithBatch
                                    ? static_cast<double>(globalBatch) / static_cast<double>(config.schedule.baseBatch)
                                    : 1.0);
}

std::unique_ptr<optim::Optimizer> makeOptimizer(const TrainConfig& config, const NamedTensors& params, double lr) {
  const auto& o = config.optimizer;
  if (o.name == "sgd" || o.name == "nesterov") {
    optim::SgdOptions s;
    s.lr = lr;
    s.momentum = o.momentum;
    s.nesterov = o.name == "nesterov";
    s.weightDecay = o.weightDecay;
    s.excludeBiasAndNormFromDecay = o.excludeBiasAndNorm;
    return std::make_unique<optim::Sgd>(params, s);
  }
  if (o.name == "lars") {
    optim::LarsOptions s;
    s.lr = lr;
    s.momentum = o.momentum;
    s.weightDecay = o.weightDecay;
    s.trustCoefficient = o.larsTrust;
    s.excludeBiasAndNorm = o.excludeBiasAndNorm;
    return std::make_unique<optim::Lars>(params, s);
  }
  optim::AdamWOptions s;
  s.lr = lr;
  s.beta1 = o.beta1;
  s.beta2 = o.beta2;
  s.eps = o.eps;
  s.weightDecay = o.weightDecay;
  s.excludeBiasAndNormFromDecay = o.excludeBiasAndNorm;
  return std::make_unique<optim::AdamW>(params, s);
}

std::shared_ptr<const optim::LrSchedule> makeSchedule(const TrainConfig& config, double lr, int64_t stepsPerEpoch,
                                                      int64_t totalSteps) {
  const auto& s = config.schedule;
  const int64_t spe = stepsPerEpoch;
  std::shared_ptr<const optim::LrSchedule> schedule;
  if (s.name == "constant") {
    schedule = std::make_shared<optim::ConstantLr>(lr);
  } else if (s.name == "step") {
    schedule = std::make_shared<optim::StepLr>(lr, s.stepEpochs * spe, s.gamma);
  } else if (s.name == "multistep") {
    std::vector<int64_t> steps;
    for (int64_t m : s.milestones) steps.push_back(m * spe);
    schedule = std::make_shared<optim::MultiStepLr>(lr, steps, s.gamma);
  } else if (s.name == "cosine") {
    schedule = std::make_shared<optim::CosineLr>(lr, totalSteps, s.minLr);
  } else {
    schedule = std::make_shared<optim::PolynomialLr>(lr, totalSteps, s.power, s.minLr);
  }
  const auto warmup = static_cast<int64_t>(std::llround(s.warmupEpochs * static_cast<double>(spe)));
  if (warmup > 0) schedule = std::make_shared<optim::WarmupLr>(schedule, warmup, s.warmupStartLr);
  return schedule;
}

}  // namespace aps::train
