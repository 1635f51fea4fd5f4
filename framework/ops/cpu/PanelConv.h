#pragma once

#include "framework/ops/cpu/Kernels.h"

namespace aps::cpu::detail {

// out (N, K, P, Q) <- conv(in (N, C, H, W), weight (K, C/g, R, S)) + bias (K, may be null).
// Lowers the whole batch as one GEMM whose columns are all N*P*Q output pixels: each
// 24-column panel of the im2col matrix is packed straight into cache (never materialised
// for the whole batch) and multiplied by a 4x24 register-tiled FMA micro-kernel, the
// scheme of Goto & van de Geijn, "Anatomy of High-Performance Matrix Multiplication"
// (2008). Every output is one fixed-order FMA chain, so its bits do not depend on the
// thread count.
void panelConvForward(float* out, const float* in, const float* weight, const float* bias, const Conv2dShape& shape);

// Whether panelConvWeightGrad handles this shape (unit stride).
bool panelConvWeightGradSupported(const Conv2dShape& shape);

// gradWeight (K, C/g, R, S) <- sum over images of gradOut (x) input patches, for unit
// stride. Each weight is a dot product over output pixels: the padded input is read in
// place at the tap's offset against gradOut laid out with the padded row width (zero in
// the extra columns), eight pixels per FMA lane. Images are summed in fixed chunks whose
// partials are added in chunk order, so the bits do not depend on the thread count.
void panelConvWeightGrad(float* gradWeight, const float* gradOut, const float* in, const Conv2dShape& shape);

}  // namespace aps::cpu::detail
