#pragma once

#include "framework/tensor/Tensor.h"

namespace aps::ops {

// Bilinear resize of x (N, C, H, W) to (N, C, outH, outW), align_corners=false, exactly as
// torch.nn.functional.interpolate(mode="bilinear").
Tensor upsampleBilinear(const Tensor& x, int64_t outH, int64_t outW);

}  // namespace aps::ops
