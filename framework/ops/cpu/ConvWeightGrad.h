#pragma once

#include "framework/ops/cpu/Kernels.h"

namespace aps::cpu::detail {

// gradWeight (K, C/g, R, S) <- sum over images of gradOut (K, P*Q) x im2col(in)^T, for any
// stride, padding, dilation and groups, as a GEMM whose reduction runs over the pixels: a
// register tile of (filter taps) x (filters) accumulators takes one outer product per
// pixel, the taps broadcast from the zero-padded input and the filters loaded from gradOut
// transposed to (pixel, filter), so no lanes are ever summed across. Every weight is one FMA
// chain over all pixels of the batch in order; threads split the weights, never the pixels,
// so the bits do not depend on the thread count. Each thread walks the batch a block of
// images at a time: it transposes the block's gradOut that its tiles read into its own buffer
// and runs all its tiles over the block while that and the block's input stay in its cache.
// For 3-wide filter rows at unit stride one broadcast serves a row's three taps (rowTile),
// which reads the input itself where the border is at most one column wide (rows outside the
// image read zeros); elsewhere the taps read the input itself where there is no padding,
// otherwise each thread's padded copy of the channels it reads.
void convWeightGrad(float* gradWeight, const float* gradOut, const float* in, const Conv2dShape& shape);

}  // namespace aps::cpu::detail
