#pragma once

#include "framework/ops/cpu/Kernels.h"

namespace aps::cpu::detail {

// gradWeight (K, C/g, R, S) <- sum over images of gradOut (K, P*Q) x im2col(in)^T, for any
// stride, padding, dilation and groups, as a GEMM whose reduction runs over the pixels: a
// register tile of (filter taps) x (filters) accumulators takes one outer product per
// pixel, the taps broadcast from the zero-padded input in place and the filters loaded from
// gradOut transposed to (pixel, filter), so no lanes are ever summed across. Every weight is
// one FMA chain over all pixels of the batch in order; threads split the weights, never the
// pixels, so the bits do not depend on the thread count.
void convWeightGrad(float* gradWeight, const float* gradOut, const float* in, const Conv2dShape& shape);

}  // namespace aps::cpu::detail
