#pragma once

// Bilinear resizing with align_corners=false as PyTorch's CPU kernel computes it:
// scale = in / out in float, source index max(scale * (dst + 0.5) - 0.5, 0), neighbour
// clamped at the last row or column. The backward CPU kernel scatters each output's
// gradient into its four taps in output order; upsampleGradAt gathers the same terms for one
// input element in the same order, which is what a CUDA thread per input element runs.

#include "framework/core/HostDevice.h"
#include "framework/ops/kernels/Math.h"

#include <cstdint>

namespace aps::kernels {

struct Tap {
  int64_t i0, i1;  // the two source indices
  float l0, l1;    // their weights
};

APS_HOST_DEVICE inline Tap bilinearTap(int64_t o, int64_t in, int64_t out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const float src = maxf32(scale * (static_cast<float>(o) + 0.5f) - 0.5f, 0.0f);
  const auto i0 = static_cast<int64_t>(src);
  const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
  const float frac = src - static_cast<float>(i0);
  const float l1 = frac < 0.0f ? 0.0f : (frac > 1.0f ? 1.0f : frac);
  return {i0, i1, 1.0f - l1, l1};
}

// One output from its row taps a and column taps b over plane x (row length w).
APS_HOST_DEVICE inline float bilinearAt(const float* x, int64_t w, const Tap& a, const Tap& b) {
  const float* row0 = x + a.i0 * w;
  const float* row1 = x + a.i1 * w;
  return a.l0 * (b.l0 * row0[b.i0] + b.l1 * row0[b.i1]) + a.l1 * (b.l0 * row1[b.i0] + b.l1 * row1[b.i1]);
}

// The outputs whose taps may reach input i: a range a little wider than needed (a tap moves
// by in / out inputs per output; the margin covers the float rounding of the source index).
// The caller tests each tap.
APS_HOST_DEVICE inline Window bilinearCovering(int64_t i, int64_t in, int64_t out) {
  return {maxI64((i - 1) * out / in - 2, 0), minI64((i + 2) * out / in + 3, out)};
}

// The backward pass at input (ih, iw) of one plane: the CPU kernel adds, for each output in
// order, a.l0 * b.l0 * g to (i0, i0), then (i0, i1), (i1, i0), (i1, i1); the same terms that
// land on (ih, iw) are added here in that order.
APS_HOST_DEVICE inline float upsampleGradAt(const float* dy, int64_t ih, int64_t iw, int64_t h, int64_t w, int64_t outH,
                                            int64_t outW) {
  const Window rows = bilinearCovering(ih, h, outH);
  const Window cols = bilinearCovering(iw, w, outW);
  float total = 0.0f;
  for (int64_t oh = rows.begin; oh < rows.end; ++oh) {
    const Tap a = bilinearTap(oh, h, outH);
    if (a.i0 != ih && a.i1 != ih) continue;
    for (int64_t ow = cols.begin; ow < cols.end; ++ow) {
      const Tap b = bilinearTap(ow, w, outW);
      if (b.i0 != iw && b.i1 != iw) continue;
      const float g = dy[oh * outW + ow];
      if (a.i0 == ih && b.i0 == iw) total += a.l0 * b.l0 * g;
      if (a.i0 == ih && b.i1 == iw) total += a.l0 * b.l1 * g;
      if (a.i1 == ih && b.i0 == iw) total += a.l1 * b.l0 * g;
      if (a.i1 == ih && b.i1 == iw) total += a.l1 * b.l1 * g;
    }
  }
  return total;
}

}  // namespace aps::kernels
