#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::ops {

// Batch normalisation over (N, H, W) per channel of x (N, C, H, W) (Ioffe & Szegedy 2015).
// Training: normalises with the batch statistics and updates runningMean/runningVar in place
// (PyTorch: unbiased variance, new = (1 - momentum) * old + momentum * batch). Eval: uses the
// running statistics. gamma, beta, runningMean and runningVar are (C) float32.
Tensor batchNorm2d(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& runningMean, Tensor& runningVar,
                   bool training, float momentum, float eps);

// relu(batchNorm2d(x, ...) + residual), or relu(batchNorm2d(x, ...)) when residual is
// undefined: the end of a residual block (and the conv-BN-ReLU unit) as one op. Its values
// and gradients are those of the separate ops bit for bit, with two passes over the
// activations fewer forward and one fewer backward, and no batch-norm output in between.
// Training mode in fp32 fuses the residual add and ReLU; a 16-bit compute precision fuses
// the ReLU only (the separate ops round batch norm's output before the add, so the add
// stays separate there); eval mode and a residual of another shape run the separate ops.
Tensor batchNorm2dRelu(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& runningMean,
                       Tensor& runningVar, bool training, float momentum, float eps, const Tensor& residual = Tensor());

}  // namespace aps::ops
