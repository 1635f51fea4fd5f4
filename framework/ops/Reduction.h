#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::ops {

// Differentiable reductions. The results do not depend on the thread count: a full
// reduction sums fixed-size blocks in double and combines them in order.
Tensor sum(const Tensor& x);   // 0-d
Tensor mean(const Tensor& x);  // 0-d
Tensor sum(const Tensor& x, const Shape& dims, bool keepDim = false);
Tensor mean(const Tensor& x, const Shape& dims, bool keepDim = false);

}  // namespace aps::ops
