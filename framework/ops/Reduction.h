#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::ops {

// Differentiable reductions. The results do not depend on the thread count: a full
// reduction sums fixed-size blocks in double and combines them in order.
Tensor sum(const Tensor& x);   // 0-d
Tensor mean(const Tensor& x);  // 0-d
Tensor sum(const Tensor& x, const Shape& dims, bool keepDim = false);
Tensor mean(const Tensor& x, const Shape& dims, bool keepDim = false);

// Index of the largest value along `dim` (int64, dim removed; the first one on ties, NaN
// counts as largest). Not differentiable: for accuracy and segmentation predictions.
Tensor argmax(const Tensor& x, int64_t dim);

}  // namespace aps::ops
