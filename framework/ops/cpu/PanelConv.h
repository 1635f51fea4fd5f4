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

}  // namespace aps::cpu::detail
