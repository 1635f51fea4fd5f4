#include "framework/nn/Dropout.h"

#include "framework/ops/Dropout.h"

namespace aps::nn {

Tensor Dropout::forward(const Tensor& input) {
  if (!isTraining()) return input;
  return ops::dropout(input, p_, true, seed_, nextStream_++);
}

}  // namespace aps::nn
