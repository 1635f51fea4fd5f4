#pragma once

#include "framework/tensor/NamedTensor.h"

namespace aps::optim {

// PyTorch's torch.nn.utils.clip_grad_norm_: the global L2 norm of every parameter's .grad (a
// double sum of squares in parameter order, so every rank and every run gets the same bits);
// each gradient is multiplied by maxNorm / (norm + 1e-6) when that is below 1. Returns the
// norm before clipping (inf or NaN when a gradient holds one; nothing is scaled then). The
// gradients must be float32 on the CPU.
double clipGradNorm(const NamedTensors& params, double maxNorm);

// PyTorch's clip_grad_value_: every gradient value clamped to [-maxValue, maxValue].
void clipGradValue(const NamedTensors& params, double maxValue);

}  // namespace aps::optim
