#pragma once

#include "framework/tensor/NamedTensor.h"
#include "framework/tensor/Stateful.h"
#include "framework/numerics/ComputeFormat.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace aps::optim {

// Base of the optimizers: named parameters in a fixed order, the current learning rate and
// per-parameter state tensors. State is saved as named tensors ("momentum_buffer.<param>",
// "step" as an int64 0-d tensor) so a checkpoint can store it next to the model.
class Optimizer : public Stateful {
 public:
  Optimizer(std::string typeName, NamedTensors params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update from the parameters' current gradients (parameters without one are skipped),
  // then the rounding of setStorageFormat.
  void step();

  // Pure 16-bit training (autograd/ComputePrecision.h, fp16_pure / bf16_pure): parameters and
  // optimizer state are stored as values of `format`, with no fp32 copy. Rounds them now
  // (nearest-even) and after every step: each update is one fused op that reads 16-bit
  // values, computes in fp32 and stores 16-bit results, as a fused GPU optimizer kernel on
  // half tensors does. Stochastic rounding (Gupta et al. 2015) of the stored results makes
  // small updates survive in expectation; element i of tensor t after step s draws
  // randomBits32(seed, s << 20 | t, i), so runs and resumes are reproducible.
  void setStorageFormat(precision::ComputeFormat format, bool stochastic = false, uint64_t seed = 0);
  precision::ComputeFormat storageFormat() const { return storageFormat_; }

  double lr() const { return lr_; }
  void setLr(double lr);
  int64_t stepCount() const { return steps_; }
  void zeroGrad(bool setToNone = false);
  // Values in all parameters.
  double parameterCount() const;
  const NamedTensors& params() const { return params_; }

  NamedTensors stateDict() const override;
  // Restores state saved by stateDict(); throws aps::Error naming the entry on a mismatch.
  void loadStateDict(const NamedTensors& state) override;

 protected:
  // The optimizer's arithmetic: one update of every parameter with a gradient.
  virtual void update() = 0;
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
  void roundToStorageFormat(bool stochastic);

  int64_t steps_ = 0;
  precision::ComputeFormat storageFormat_ = precision::ComputeFormat::Fp32;
  bool stochastic_ = false;
  uint64_t roundingSeed_ = 0;
  std::map<std::string, Tensor> state_;  // "<kind>.<param name>"
};

}  // namespace aps::optim
