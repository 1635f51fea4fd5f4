#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::autograd {

// dst += src, elementwise, float32, same shape; dst may be any strided view.
void addInto(Tensor& dst, const Tensor& src);
// a + b into a fresh contiguous tensor (the engine sums gradients from several uses).
Tensor addGradients(const Tensor& a, const Tensor& b);

}  // namespace aps::autograd
