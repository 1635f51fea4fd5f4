#pragma once

#include "framework/tensor/Tensor.h"

#include <vector>

namespace aps::ops {

// Differentiable shape ops (the Tensor methods of the same names record no history).
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, int64_t startDim = 1, int64_t endDim = -1);
Tensor permute(const Tensor& x, const Shape& order);                         // returns a contiguous copy
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);  // contiguous copy
Tensor concat(const std::vector<Tensor>& inputs, int64_t dim);

}  // namespace aps::ops
