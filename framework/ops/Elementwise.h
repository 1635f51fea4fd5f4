#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::ops {

// Differentiable elementwise ops on float32 tensors. Binary ops broadcast (NumPy rules, e.g. a
// per-channel bias of shape (C, 1, 1) onto (N, C, H, W)); the gradient of a broadcast input is
// summed back to its shape.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, float scalar);
Tensor addScalar(const Tensor& a, float scalar);
Tensor neg(const Tensor& a);
Tensor relu(const Tensor& x);

}  // namespace aps::ops

namespace aps {
inline Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
inline Tensor operator*(const Tensor& a, float s) { return ops::mul(a, s); }
inline Tensor operator*(float s, const Tensor& a) { return ops::mul(a, s); }
inline Tensor operator-(const Tensor& a) { return ops::neg(a); }
}  // namespace aps
