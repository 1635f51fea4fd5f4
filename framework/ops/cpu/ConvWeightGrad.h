#pragma once

#include "framework/ops/cpu/Kernels.h"

namespace aps::cpu::detail {

// gradWeight (K, C/g, R, S) <- sum over images of gradOut (K, P*Q) x im2col(in)^T, for any
// stride, padding, dilation and groups. Every weight is a dot product of a gradOut row with
// an im2col row, eight pixels per FMA lane, walked in L1-sized pixel blocks with lanes
// reduced once in a fixed order. For unit stride on wide maps the im2col rows are never
// written: they are shifted windows of the zero-padded input, against gradOut laid out over
// the padded row width. The batch is cut into at most 16 fixed chunks (a function of N
// alone) whose partials are added in chunk order, so the bits do not depend on the thread
// count.
void convWeightGrad(float* gradWeight, const float* gradOut, const float* in, const Conv2dShape& shape);

}  // namespace aps::cpu::detail
