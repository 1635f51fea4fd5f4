#pragma once

#include "framework/nn/Module.h"
#include "framework/ops/Pooling.h"

namespace aps::nn {

// torch.nn.MaxPool2d (stride 0 in the options means stride = kernel).
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const ops::Pool2dOptions& options) : Module("MaxPool2d"), options_(options) {}
  Tensor forward(const Tensor& input) override { return ops::maxPool2d(input, options_); }

 private:
  ops::Pool2dOptions options_;
};

}  // namespace aps::nn
