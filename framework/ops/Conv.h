#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::ops {

struct Conv2dOptions {
  int64_t strideH = 1, strideW = 1;
  int64_t padH = 0, padW = 0;
  int64_t dilationH = 1, dilationW = 1;
  int64_t groups = 1;
};

// out (N, K, P, Q) = conv(x (N, C, H, W), weight (K, C/groups, R, S)) + bias (K); bias may be
// undefined. Runs cpu::conv2dForward / conv2dBackward.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options);

}  // namespace aps::ops
