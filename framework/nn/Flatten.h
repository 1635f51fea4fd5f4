#pragma once

#include "framework/nn/Module.h"

namespace aps::nn {

// torch.nn.Flatten (dims startDim..endDim merged; default keeps the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t startDim = 1, int64_t endDim = -1)
      : Module("Flatten"), startDim_(startDim), endDim_(endDim) {}
  Tensor forward(const Tensor& input) override;

 private:
  int64_t startDim_, endDim_;
};

}  // namespace aps::nn
