#pragma once

#include "framework/ops/cpu/Kernels.h"
#include "framework/ops/cpu/PanelConv.h"

namespace aps::cpu::detail {

// Whether the convolutions use Winograd where it applies: yes unless the environment sets
// APS_WINOGRAD=0 (read once), which keeps every convolution on the direct kernels' rounding.
bool winogradEnabled();

// Whether winogradConvForward handles this shape (and is enabled): a 3x3 kernel at unit stride
// and dilation, one group, padding of at most 2, channel and filter counts where it pays and its
// transformed weights stay in cache (8 to 64 each), and more than 16 output tiles per channel or
// filter (whichever is more) in the batch, so that its per-call costs are paid back (ResNet-20's
// layers at batch 128 qualify; a simulated rank's batch of 1 to 8 mostly does not).
bool winogradSupported(const Conv2dShape& shape);

// out (N, K, P, Q) <- conv(in (N, C, H, W), weight (K, C, 3, 3)) + bias (K, may be null) by
// Winograd's minimal filtering F(2x2, 3x3) (Lavin & Gray, "Fast Algorithms for Convolutional
// Neural Networks", 2016): each 2x2 output tile is A^T [sum_c (G g G^T) (.) (B^T d B)] A over
// the 4x4 input tile d it reads, 16 multiplications per tile, channel and filter instead of
// 36. The 16 products of every (tile, filter) pair are 16 independent GEMMs over the channels,
// run by the same register-tiled FMA kernel as the panel convolution, with tiles in the vector
// lanes. The transforms take whole tile rows: the input's 4 rows of a tile row are padded and
// split into even and odd columns, so B^T d B is unit-stride vector arithmetic over the tiles
// of the row, and A^T m A writes the two output rows back interleaved. Consecutive tile rows
// share two input rows, which a run of tile rows loads and splits once.
//
// The rounding differs from direct convolution (the transforms add and subtract before and
// after the products; the error stays within a few units in the last place of the inputs'
// magnitudes). Every output is one fixed sequence of operations that depends on the shape
// alone, so its bits depend neither on the thread count nor on the batch's split.
// PanelWeights::FlippedTransposed reads the weight of the convolution whose input gradient
// this one computes (Conv2d.cpp), as in panelConvForward.
void winogradConvForward(float* out, const float* in, const float* weight, const float* bias, const Conv2dShape& shape,
                         PanelWeights layout = PanelWeights::AsGiven);

}  // namespace aps::cpu::detail
