#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::ops {

// Batch normalisation over (N, H, W) per channel of x (N, C, H, W) (Ioffe & Szegedy 2015).
// Training: normalises with the batch statistics and updates runningMean/runningVar in place
// (PyTorch: unbiased variance, new = (1 - momentum) * old + momentum * batch). Eval: uses the
// running statistics. gamma, beta, runningMean and runningVar are (C) float32.
Tensor batchNorm2d(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& runningMean, Tensor& runningVar,
                   bool training, float momentum, float eps);

}  // namespace aps::ops
