// Bilinear resizing with align_corners=false, reproducing PyTorch's CPU kernel
// (aten/src/ATen/native/UpSample.h): scale = in / out in float, source index
// max(scale * (dst + 0.5) - 0.5, 0), neighbour clamped at the last row or column.
#include "framework/ops/kernels/Upsample.h"
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/core/Profile.h"
#include "framework/ops/cpu/Kernels.h"

#include <algorithm>
#include <vector>

namespace aps::cpu {

namespace {

using kernels::Tap;

// The taps of every output index along one axis, computed once per call.
std::vector<Tap> taps(int64_t in, int64_t out) {
  std::vector<Tap> result(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) result[static_cast<size_t>(o)] = kernels::bilinearTap(o, in, out);
  return result;
}

void checkSizes(int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH, int64_t outW) {
  APS_CHECK(n >= 1 && c >= 1 && h >= 1 && w >= 1 && outH >= 1 && outW >= 1,
            "upsample_bilinear2d: sizes must be positive (n={}, c={}, h={}, w={}, out={}x{})", n, c, h, w, outH, outW);
}

}  // namespace

void upsampleBilinearForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                             int64_t outW) {
  checkSizes(n, c, h, w, outH, outW);
  const profile::Scope scope("upsample.forward", 0.0, 4.0 * static_cast<double>(n * c * (h * w + outH * outW)));
  const std::vector<Tap> th = taps(h, outH), tw = taps(w, outW);
  parallelFor(n * c, 4, [&](int64_t plane0, int64_t plane1) {
    for (int64_t plane = plane0; plane < plane1; ++plane) {
      const float* x = in + plane * h * w;
      float* y = out + plane * outH * outW;
      for (int64_t oh = 0; oh < outH; ++oh) {
        const Tap& a = th[static_cast<size_t>(oh)];
        for (int64_t ow = 0; ow < outW; ++ow)
          y[oh * outW + ow] = kernels::bilinearAt(x, w, a, tw[static_cast<size_t>(ow)]);
      }
    }
  });
}

void upsampleBilinearBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                              int64_t outH, int64_t outW) {
  checkSizes(n, c, h, w, outH, outW);
  const profile::Scope scope("upsample.backward", 0.0, 4.0 * static_cast<double>(n * c * (h * w + outH * outW)));
  const std::vector<Tap> th = taps(h, outH), tw = taps(w, outW);
  parallelFor(n * c, 4, [&](int64_t plane0, int64_t plane1) {
    for (int64_t plane = plane0; plane < plane1; ++plane) {
      float* dx = gradIn + plane * h * w;
      std::fill(dx, dx + h * w, 0.0f);
      const float* dy = gradOut + plane * outH * outW;
      for (int64_t oh = 0; oh < outH; ++oh) {
        const Tap& a = th[static_cast<size_t>(oh)];
        float* row0 = dx + a.i0 * w;
        float* row1 = dx + a.i1 * w;
        for (int64_t ow = 0; ow < outW; ++ow) {
          const Tap& b = tw[static_cast<size_t>(ow)];
          const float g = dy[oh * outW + ow];
          row0[b.i0] += a.l0 * b.l0 * g;
          row0[b.i1] += a.l0 * b.l1 * g;
          row1[b.i0] += a.l1 * b.l0 * g;
          row1[b.i1] += a.l1 * b.l1 * g;
        }
      }
    }
  });
}

}  // namespace aps::cpu
