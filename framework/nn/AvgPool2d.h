#pragma once

#include "framework/nn/Module.h"
#include "framework/ops/Pooling.h"

namespace aps::nn {

// torch.nn.AvgPool2d.
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const ops::Pool2dOptions& options, bool countIncludePad = true)
      : Module("AvgPool2d"), options_(options), countIncludePad_(countIncludePad) {}
  Tensor forward(const Tensor& input) override { return ops::avgPool2d(input, options_, countIncludePad_); }

 private:
  ops::Pool2dOptions options_;
  bool countIncludePad_;
};

}  // namespace aps::nn
