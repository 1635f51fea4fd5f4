#pragma once

#include "data/Example.h"

namespace aps::data {

// Resizes with the bilinear (triangle) filter, antialiased when shrinking, exactly as PyTorch's
// F.interpolate(mode="bilinear", align_corners=False, antialias=True) does for torchvision's
// Resize on tensors (the algorithm of PIL's Image.resize): per output pixel a triangle filter
// stretched by the scale factor when shrinking, weights normalised, applied along the width
// first and then the height in float, rounded half-to-even back to bytes.
void resizeBilinear(const Image& in, int height, int width, Image& out);

}  // namespace aps::data
