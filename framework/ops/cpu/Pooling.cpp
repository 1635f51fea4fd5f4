// Max, average and adaptive average pooling over NCHW planes, following PyTorch's CPU
// kernels (window bounds, padding divisor, adaptive bins). Work is split over (n, c)
// planes; a backward pass adds within its own plane in a fixed order, so it is
// deterministic and independent of the thread count.
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/core/Profile.h"
#include "framework/ops/cpu/Kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace aps::cpu {

namespace {

constexpr int64_t kPlaneGrain = 4;

void checkPool(const Pool2dShape& s, const char* op) {
  APS_CHECK(s.n >= 1 && s.c >= 1 && s.h >= 1 && s.w >= 1, "{}: sizes must be positive (n={}, c={}, h={}, w={})", op,
            s.n, s.c, s.h, s.w);
  APS_CHECK(s.kernelH >= 1 && s.kernelW >= 1 && s.strideH >= 1 && s.strideW >= 1, "{}: kernel and stride must be >= 1",
            op);
  // PyTorch's rule: padding may be at most half the kernel, so every window sees the input.
  APS_CHECK(s.padH >= 0 && s.padW >= 0 && 2 * s.padH <= s.kernelH && 2 * s.padW <= s.kernelW,
            "{}: padding ({}, {}) must be between 0 and half the kernel ({}, {})", op, s.padH, s.padW, s.kernelH,
            s.kernelW);
  APS_CHECK(s.outH() >= 1 && s.outW() >= 1, "{}: the {}x{} window does not fit the padded {}x{} input", op, s.kernelH,
            s.kernelW, s.h, s.w);
}

// The window [begin, end) of output index o along one axis, clipped to the input.
struct Window {
  int64_t begin, end;
};
Window window(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t size) {
  const int64_t start = o * stride - pad;
  return {std::max<int64_t>(start, 0), std::min(start + kernel, size)};
}

// PyTorch's divisor: with count_include_pad the window is clipped to the padded input only.
int64_t avgDivisor(int64_t oh, int64_t ow, const Pool2dShape& s, bool countIncludePad) {
  const int64_t hs = oh * s.strideH - s.padH, ws = ow * s.strideW - s.padW;
  const int64_t he = std::min(hs + s.kernelH, s.h + s.padH), we = std::min(ws + s.kernelW, s.w + s.padW);
  if (countIncludePad) return (he - hs) * (we - ws);
  return (std::min(he, s.h) - std::max<int64_t>(hs, 0)) * (std::min(we, s.w) - std::max<int64_t>(ws, 0));
}

void checkAdaptive(int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH, int64_t outW) {
  APS_CHECK(n >= 1 && c >= 1 && h >= 1 && w >= 1 && outH >= 1 && outW >= 1,
            "adaptive_avg_pool2d: sizes must be positive (n={}, c={}, h={}, w={}, out={}x{})", n, c, h, w, outH, outW);
}

// PyTorch's adaptive bins: [floor(i * size / out), ceil((i + 1) * size / out)).
Window adaptiveBin(int64_t i, int64_t size, int64_t out) { return {i * size / out, ((i + 1) * size + out - 1) / out}; }

}  // namespace

void maxPool2dForward(float* out, int64_t* argmax, const float* in, const Pool2dShape& shape) {
  checkPool(shape, "max_pool2d");
  const profile::Scope scope(
      "pool.forward", 0.0,
      4.0 * static_cast<double>(shape.n * shape.c * (shape.h * shape.w + shape.outH() * shape.outW())));
  const Pool2dShape& s = shape;
  const int64_t p = s.outH(), q = s.outW();
  parallelFor(s.n * s.c, kPlaneGrain, [&](int64_t plane0, int64_t plane1) {
    for (int64_t plane = plane0; plane < plane1; ++plane) {
      const float* x = in + plane * s.h * s.w;
      for (int64_t oh = 0; oh < p; ++oh) {
        const Window wh = window(oh, s.strideH, s.padH, s.kernelH, s.h);
        for (int64_t ow = 0; ow < q; ++ow) {
          const Window ww = window(ow, s.strideW, s.padW, s.kernelW, s.w);
          float best = -std::numeric_limits<float>::infinity();
          int64_t bestIndex = wh.begin * s.w + ww.begin;
          // First maximum in scan order wins; a NaN wins and ends the scan, as in PyTorch.
          bool sawNaN = false;
          for (int64_t ih = wh.begin; ih < wh.end && !sawNaN; ++ih) {
            for (int64_t iw = ww.begin; iw < ww.end; ++iw) {
              const float v = x[ih * s.w + iw];
              if (v > best || std::isnan(v)) {
                best = v;
                bestIndex = ih * s.w + iw;
                sawNaN = std::isnan(v);
                if (sawNaN) break;
              }
            }
          }
          const int64_t o = plane * p * q + oh * q + ow;
          out[o] = best;
          if (argmax != nullptr) argmax[o] = bestIndex;
        }
      }
    }
  });
}

void maxPool2dBackward(float* gradIn, const float* gradOut, const int64_t* argmax, const Pool2dShape& shape) {
  checkPool(shape, "max_pool2d_backward");
  const profile::Scope scope(
      "pool.backward", 0.0,
      4.0 * static_cast<double>(shape.n * shape.c * (shape.h * shape.w + shape.outH() * shape.outW())));
  const Pool2dShape& s = shape;
  const int64_t pq = s.outH() * s.outW(), hw = s.h * s.w;
  parallelFor(s.n * s.c, kPlaneGrain, [&](int64_t plane0, int64_t plane1) {
    for (int64_t plane = plane0; plane < plane1; ++plane) {
      float* dx = gradIn + plane * hw;
      std::fill(dx, dx + hw, 0.0f);
      const float* dy = gradOut + plane * pq;
      const int64_t* index = argmax + plane * pq;
      for (int64_t o = 0; o < pq; ++o) {
        APS_ASSERT(index[o] >= 0 && index[o] < hw);
        dx[index[o]] += dy[o];
      }
    }
  });
}

void avgPool2dForward(float* out, const float* in, const Pool2dShape& shape, bool countIncludePad) {
  checkPool(shape, "avg_pool2d");
  const profile::Scope scope(
      "pool.forward", 0.0,
      4.0 * static_cast<double>(shape.n * shape.c * (shape.h * shape.w + shape.outH() * shape.outW())));
  const Pool2dShape& s = shape;
  const int64_t p = s.outH(), q = s.outW();
  parallelFor(s.n * s.c, kPlaneGrain, [&](int64_t plane0, int64_t plane1) {
    for (int64_t plane = plane0; plane < plane1; ++plane) {
      const float* x = in + plane * s.h * s.w;
      for (int64_t oh = 0; oh < p; ++oh) {
        const Window wh = window(oh, s.strideH, s.padH, s.kernelH, s.h);
        for (int64_t ow = 0; ow < q; ++ow) {
          const Window ww = window(ow, s.strideW, s.padW, s.kernelW, s.w);
          float total = 0.0f;
          for (int64_t ih = wh.begin; ih < wh.end; ++ih) {
            for (int64_t iw = ww.begin; iw < ww.end; ++iw) total += x[ih * s.w + iw];
          }
          out[plane * p * q + oh * q + ow] = total / static_cast<float>(avgDivisor(oh, ow, s, countIncludePad));
        }
      }
    }
  });
}

void avgPool2dBackward(float* gradIn, const float* gradOut, const Pool2dShape& shape, bool countIncludePad) {
  checkPool(shape, "avg_pool2d_backward");
  const profile::Scope scope(
      "pool.backward", 0.0,
      4.0 * static_cast<double>(shape.n * shape.c * (shape.h * shape.w + shape.outH() * shape.outW())));
  const Pool2dShape& s = shape;
  const int64_t p = s.outH(), q = s.outW(), hw = s.h * s.w;
  parallelFor(s.n * s.c, kPlaneGrain, [&](int64_t plane0, int64_t plane1) {
    for (int64_t plane = plane0; plane < plane1; ++plane) {
      float* dx = gradIn + plane * hw;
      std::fill(dx, dx + hw, 0.0f);
      for (int64_t oh = 0; oh < p; ++oh) {
        const Window wh = window(oh, s.strideH, s.padH, s.kernelH, s.h);
        for (int64_t ow = 0; ow < q; ++ow) {
          const Window ww = window(ow, s.strideW, s.padW, s.kernelW, s.w);
          const float g =
              gradOut[plane * p * q + oh * q + ow] / static_cast<float>(avgDivisor(oh, ow, s, countIncludePad));
          for (int64_t ih = wh.begin; ih < wh.end; ++ih) {
            for (int64_t iw = ww.begin; iw < ww.end; ++iw) dx[ih * s.w + iw] += g;
          }
        }
      }
    }
  });
}

void adaptiveAvgPool2dForward(float* out, const float* in, int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH,
                              int64_t outW) {
  checkAdaptive(n, c, h, w, outH, outW);
  const profile::Scope scope("pool.forward", 0.0, 4.0 * static_cast<double>(n * c * (h * w + outH * outW)));
  parallelFor(n * c, kPlaneGrain, [&](int64_t plane0, int64_t plane1) {
    for (int64_t plane = plane0; plane < plane1; ++plane) {
      const float* x = in + plane * h * w;
      for (int64_t oh = 0; oh < outH; ++oh) {
        const Window bh = adaptiveBin(oh, h, outH);
        for (int64_t ow = 0; ow < outW; ++ow) {
          const Window bw = adaptiveBin(ow, w, outW);
          float total = 0.0f;
          for (int64_t ih = bh.begin; ih < bh.end; ++ih) {
            for (int64_t iw = bw.begin; iw < bw.end; ++iw) total += x[ih * w + iw];
          }
          out[(plane * outH + oh) * outW + ow] = total / static_cast<float>((bh.end - bh.begin) * (bw.end - bw.begin));
        }
      }
    }
  });
}

void adaptiveAvgPool2dBackward(float* gradIn, const float* gradOut, int64_t n, int64_t c, int64_t h, int64_t w,
                               int64_t outH, int64_t outW) {
  checkAdaptive(n, c, h, w, outH, outW);
  const profile::Scope scope("pool.backward", 0.0, 4.0 * static_cast<double>(n * c * (h * w + outH * outW)));
  parallelFor(n * c, kPlaneGrain, [&](int64_t plane0, int64_t plane1) {
    for (int64_t plane = plane0; plane < plane1; ++plane) {
      float* dx = gradIn + plane * h * w;
      std::fill(dx, dx + h * w, 0.0f);
      for (int64_t oh = 0; oh < outH; ++oh) {
        const Window bh = adaptiveBin(oh, h, outH);
        for (int64_t ow = 0; ow < outW; ++ow) {
          const Window bw = adaptiveBin(ow, w, outW);
          const float g =
              gradOut[(plane * outH + oh) * outW + ow] / static_cast<float>((bh.end - bh.begin) * (bw.end - bw.begin));
          for (int64_t ih = bh.begin; ih < bh.end; ++ih) {
            for (int64_t iw = bw.begin; iw < bw.end; ++iw) dx[ih * w + iw] += g;
          }
        }
      }
    }
  });
}

}  // namespace aps::cpu
