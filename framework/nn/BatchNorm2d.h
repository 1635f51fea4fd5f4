#pragma once

#include "framework/nn/Module.h"

namespace aps::nn {

// torch.nn.BatchNorm2d (affine, tracking running stats): parameters "weight" (ones), "bias"
// (zeros); buffers "running_mean", "running_var", "num_batches_tracked" (int64, torchvision names).
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, float eps = 1e-5f, float momentum = 0.1f);
  Tensor forward(const Tensor& input) override;
  // relu(forward(input) + residual), or relu(forward(input)) without a residual, as one op
  // (ops::batchNorm2dRelu): the same values and gradients in fewer passes over memory.
  Tensor forwardRelu(const Tensor& input, const Tensor& residual = Tensor());
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }
  Tensor& runningMean() { return runningMean_; }
  Tensor& runningVar() { return runningVar_; }

 private:
  float eps_, momentum_;
  Tensor weight_, bias_, runningMean_, runningVar_, batchesTracked_;
};

}  // namespace aps::nn
