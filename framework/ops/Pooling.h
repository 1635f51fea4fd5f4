#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::ops {

struct Pool2dOptions {
  int64_t kernelH = 1, kernelW = 1;
  int64_t strideH = 0, strideW = 0;  // 0: same as the kernel (PyTorch's default)
  int64_t padH = 0, padW = 0;
};

// Pooling over x (N, C, H, W) with PyTorch semantics (floor mode; padding at most half the kernel).
Tensor maxPool2d(const Tensor& x, const Pool2dOptions& options);
Tensor avgPool2d(const Tensor& x, const Pool2dOptions& options, bool countIncludePad = true);
// PyTorch's adaptive bins: [floor(i*H/outH), ceil((i+1)*H/outH)).
Tensor adaptiveAvgPool2d(const Tensor& x, int64_t outH, int64_t outW);

}  // namespace aps::ops
