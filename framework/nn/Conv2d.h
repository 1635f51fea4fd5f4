#pragma once

#include "framework/core/Rng.h"
#include "framework/nn/Module.h"
#include "framework/ops/Conv.h"

namespace aps::nn {

struct Conv2dSpec {
  int64_t in = 1, out = 1;
  int64_t kernel = 1;  // square kernel; kernelH/kernelW override when > 0
  int64_t kernelH = 0, kernelW = 0;
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

// torch.nn.Conv2d: parameters "weight" (out, in/groups, kH, kW) and "bias" (out), PyTorch's
// default init. Use as Conv2d({.in = 3, .out = 16, .kernel = 3, .padding = 1, .bias = false}, rng).
class Conv2d : public Module {
 public:
  Conv2d(const Conv2dSpec& spec, Rng& rng);
  Tensor forward(const Tensor& input) override;
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }
  const Conv2dSpec& spec() const { return spec_; }

 private:
  Conv2dSpec spec_;
  ops::Conv2dOptions options_;
  Tensor weight_, bias_;
};

}  // namespace aps::nn
