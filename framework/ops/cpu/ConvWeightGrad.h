#pragma once

#include "framework/ops/cpu/Kernels.h"

namespace aps::cpu::detail {

// gradWeight (K, C/g, R, S) <- sum over images of gradOut (K, P*Q) x im2col(in)^T, for any
// stride, padding, dilation and groups. The batch is cut into at most 16 fixed chunks (a
// function of N alone); inside a chunk the images' output pixels are concatenated into one
// long row, and every weight is a dot product of a gradOut row with an im2col row, eight
// pixels per FMA lane, with lanes reduced in a fixed order. Chunk partials are added in
// chunk order, so the bits do not depend on the thread count.
void convWeightGrad(float* gradWeight, const float* gradOut, const float* in, const Conv2dShape& shape);

}  // namespace aps::cpu::detail
