#pragma once

#include "framework/tensor/NamedTensor.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace aps::optim {

// Base of the optimizers: named parameters in a fixed order, the current learning rate and
// per-parameter state tensors. State is saved as named tensors ("momentum_buffer.<param>",
// "step" as an int64 0-d tensor) so a checkpoint can store it next to the model.
class Optimizer {
 public:
  Optimizer(std::string typeName, NamedTensors params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update from the parameters' current gradients (parameters without one are skipped).
  virtual void step() = 0;

  double lr() const { return lr_; }
  void setLr(double lr);
  int64_t stepCount() const { return steps_; }
  void zeroGrad(bool setToNone = false);
  const NamedTensors& params() const { return params_; }

  NamedTensors stateDict() const;
  // Restores state saved by stateDict(); throws aps::Error naming the entry on a mismatch.
  void loadStateDict(const NamedTensors& state);

 protected:
  // Weight decay applies to a parameter unless the optimizer was told to exclude biases and
  // normalisation parameters, which are exactly the 1-D parameters (bias, BN weight/bias).
  static bool isBiasOrNorm(const Tensor& param) { return param.dim() <= 1; }
  // The state tensor `kind` of parameter i (zeros of its shape, created on first use).
  Tensor& stateFor(const std::string& kind, size_t i);
  bool hasState(const std::string& kind, size_t i) const;
  void countStep() { ++steps_; }

  std::string typeName_;
  NamedTensors params_;
  double lr_;

 private:
  int64_t steps_ = 0;
  std::map<std::string, Tensor> state_;  // "<kind>.<param name>"
};

}  // namespace aps::optim
