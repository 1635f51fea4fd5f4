#include "framework/nn/ReLU.h"

#include "framework/ops/Elementwise.h"

namespace aps::nn {

Tensor ReLU::forward(const Tensor& input) { return ops::relu(input); }

}  // namespace aps::nn
