#pragma once

#include "framework/nn/Module.h"
#include "framework/ops/Pooling.h"

namespace aps::nn {

// torch.nn.AdaptiveAvgPool2d.
class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(int64_t outH, int64_t outW) : Module("AdaptiveAvgPool2d"), outH_(outH), outW_(outW) {}
  Tensor forward(const Tensor& input) override { return ops::adaptiveAvgPool2d(input, outH_, outW_); }

 private:
  int64_t outH_, outW_;
};

}  // namespace aps::nn
