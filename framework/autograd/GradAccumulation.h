#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::autograd {

// dst += src, elementwise, float32, same shape; dst may be any strided view.
void addInto(Tensor& dst, const Tensor& src);
// dst = 0 + src element by element: zeroing dst and then addInto, in one pass (a -0 becomes
// +0 and a NaN is quieted exactly as there).
void assignZeroPlus(Tensor& dst, const Tensor& src);
// a + b into a fresh contiguous tensor (the engine sums gradients from several uses).
Tensor addGradients(const Tensor& a, const Tensor& b);
// Whether t is a contiguous float32 tensor that nothing else can see (no other tensor, view
// or closure holds it or its storage): a gradient its holder may overwrite in place.
bool writableInPlace(const Tensor& t);

}  // namespace aps::autograd
