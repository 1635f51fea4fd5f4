#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::ops {

// autocast's cast (torch.autocast; ComputePrecision.h). The ops that run in the 16-bit
// compute format (conv2d, linear, matmul) pass each float input through it: under a 16-bit
// compute precision a tensor whose values are not known to be format values (fp32 master
// weights in mixed modes, input data) becomes a rounded copy, a differentiable op whose
// backward hands the (16-bit) gradient to the original unchanged; everything else (fp32
// mode, activations an op already rounded, pure-mode parameters) is returned as it is.
Tensor autocastInput(const Tensor& t);

}  // namespace aps::ops
