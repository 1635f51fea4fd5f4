#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::ops {

// NumPy broadcasting: align trailing dims; a size-1 dim stretches. Throws
// "<op>: shapes [2, 3] and [3, 2] do not match" when the shapes are not broadcastable.
Shape broadcastShapes(const char* op, const Shape& a, const Shape& b);

// x materialised at a broadcast shape (no autograd).
Tensor broadcastTo(const Tensor& x, const Shape& shape);

// The gradient of a broadcast: g summed over the dims that `shape` stretched (no autograd).
// Sums run in a fixed order, so the result does not depend on the thread count.
Tensor sumTo(const Tensor& g, const Shape& shape);

}  // namespace aps::ops
