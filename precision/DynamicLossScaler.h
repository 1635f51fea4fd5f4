#pragma once

#include "framework/tensor/NamedTensor.h"
#include "framework/tensor/Stateful.h"
#include "framework/numerics/ComputeFormat.h"

#include <cstdint>
#include <string>

namespace aps::precision {

// Dynamic loss scaling (Micikevicius et al., "Mixed Precision Training", ICLR 2018;
// torch.cuda.amp.GradScaler): backward starts from the loss gradient `scale` instead of 1,
// so small activation gradients stay above the 16-bit format's underflow; gradients are
// divided by the scale before the update. A step whose gradients hold inf or NaN is
// skipped and the scale is multiplied by backoffFactor; after growthInterval good steps in
// a row it is multiplied by growthFactor. The scale stays within [minScale, maxScale].
class DynamicLossScaler : public Stateful {
 public:
  struct Options {
    double initialScale = 65536.0;  // 2^16
    double growthFactor = 2.0;
    double backoffFactor = 0.5;
    int64_t growthInterval = 2000;
    double minScale = 1.0;
    double maxScale = 0x1p24;
  };
  // Everything needed to resume bit for bit.
  struct State {
    double scale = 65536.0;
    int64_t goodSteps = 0;     // finite steps since the last change of the scale
    int64_t skippedSteps = 0;  // steps skipped for inf/NaN gradients, in total
    bool operator==(const State&) const = default;
  };

  explicit DynamicLossScaler(const Options& options);
  DynamicLossScaler() : DynamicLossScaler(Options{}) {}

  float scale() const { return static_cast<float>(state_.scale); }
  // The gradient to start backward with: autograd::backward(loss, scaler.rootGradient()).
  Tensor rootGradient() const;
  // Divides every parameter's gradient by the scale in place (fp32 arithmetic, then rounded
  // to gradFormat: the parameters' format, 16-bit in pure modes) and returns whether all
  // gradients are finite.
  bool unscaleGradients(const NamedTensors& params, precision::ComputeFormat gradFormat) const;
  // Whether every parameter gradient is finite (when the caller unscales by other means).
  static bool gradientsFinite(const NamedTensors& params);
  // After each step's backward: returns whether the optimizer should apply this step (the
  // gradients were finite), and updates the scale.
  bool update(bool gradientsFinite);

  const Options& options() const { return options_; }
  State state() const { return state_; }
  void setState(const State& s);
  // The state for checkpoints, as every stateful part of aps saves it: "loss_scale", one
  // int64[3] {bits of the double scale, good steps, skipped steps}. loadStateDict checks it
  // (finite positive scale, non-negative counts) and throws aps::Error naming the entry.
  NamedTensors stateDict() const override;
  void loadStateDict(const NamedTensors& state) override;

 private:
  Options options_;
  State state_;
};

}  // namespace aps::precision
