#pragma once

#include "framework/ops/cpu/Kernels.h"

namespace aps::cpu::detail {

// padded <- planes [plane0, plane1) of in (planes, h, w) with a zero border, plane i at
// padded + i * (h + 2 padH) (w + 2 padW). Serial: callers split the planes or the images.
void padPlaneRange(float* padded, const float* in, int64_t plane0, int64_t plane1, int64_t h, int64_t w, int64_t padH,
                   int64_t padW);

// Whether panelConvForward handles this shape: few enough padded columns wasted (it
// computes over the padded row width) that reading the input in place pays, and a kernel at
// least as large as the stride.
bool panelConvSupported(const Conv2dShape& shape);

// out (N, K, P, Q) <- conv(in (N, C, H, W), weight (K, C/g, R, S)) + bias (K, may be null),
// without im2col. The zero-padded input is split into stride phases (row y % strideH, column
// x % strideW; one phase at unit stride) and output pixels are indexed over a phase's row
// width (p * Wp + q), so the im2col row of filter tap (c, r, t) for a run of pixels is simply
// the split input at a fixed offset: a register-tiled FMA micro-kernel (8 filters x 16 to 48
// pixels on AVX-512, 4 x 8 to 24 on AVX2; Goto & van de Geijn, "Anatomy of High-Performance
// Matrix Multiplication", 2008) reads it in place, and the columns with q >= Q are dropped.
// With at least two images per thread (or one thread), each image is padded into its thread's
// buffer just before its tiles are computed, so the padded planes are read from cache; smaller
// batches are padded whole first and their tiles shared out. Small maps at unit stride with a
// same-size output are stacked several images to a block, one tall plane per channel with the
// zero border rows shared between images, where wider tiles then waste fewer columns
// (ResNet-20's 8x8 layers). Every output is one fixed-order FMA chain, so its bits depend
// neither on the thread count nor on the path.
//
// The weights are read where they lie (no packed copy): each broadcast weight is found by a
// per-tap offset. With PanelWeights::FlippedTransposed, `weight` is (C, K/g, R, S): the weight
// of the convolution whose input gradient this one computes (Conv2d.cpp), read flipped in
// space and transposed in channels through those offsets, without a flipped copy.
enum class PanelWeights { AsGiven, FlippedTransposed };
void panelConvForward(float* out, const float* in, const float* weight, const float* bias, const Conv2dShape& shape,
                      PanelWeights layout = PanelWeights::AsGiven);

}  // namespace aps::cpu::detail
