#pragma once

#include "framework/nn/Module.h"

namespace aps::nn {

// torch.nn.ReLU (no parameters).
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& input) override;
};

}  // namespace aps::nn
