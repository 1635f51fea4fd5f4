#include "framework/nn/Flatten.h"

#include "framework/ops/Shaping.h"

namespace aps::nn {

Tensor Flatten::forward(const Tensor& input) { return ops::flatten(input, startDim_, endDim_); }

}  // namespace aps::nn
