#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::ops {

// y (N, out) = x (N, in) * weight (out, in)^T + bias (out); bias may be undefined.
// Products run on Eigen's GEMM (deterministic for a given thread count).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// (M, K) x (K, N) -> (M, N)
Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace aps::ops
