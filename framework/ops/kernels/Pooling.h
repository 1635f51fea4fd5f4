#pragma once

// Pooling windows (PyTorch's window bounds, padding divisor and adaptive bins) and the value
// of one output, or of one input gradient, computed from them. The CPU kernels loop over
// outputs and call the forward functions; the backward CPU kernels scatter each output's
// gradient into its window in output order, and the *GradAt functions compute the same sum
// for one input element by gathering from the outputs whose windows hold it, in the same
// output order, so a CUDA thread per input element gets the CPU's bits with no atomics.

#include "framework/core/HostDevice.h"
#include "framework/ops/kernels/Math.h"

#include <cstdint>

namespace aps::kernels {

using aps::bitCast;

// Output o's window clipped to the input.
APS_HOST_DEVICE inline Window poolWindow(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t size) {
  const int64_t start = o * stride - pad;
  return {maxI64(start, 0), minI64(start + kernel, size)};
}

// The outputs (of `out`) whose windows hold input i: start <= i < start + kernel with
// start = o * stride - pad.
APS_HOST_DEVICE inline Window poolCovering(int64_t i, int64_t stride, int64_t pad, int64_t kernel, int64_t out) {
  const int64_t lowest = i + pad - kernel + 1;  // o * stride >= lowest
  const int64_t begin = lowest <= 0 ? 0 : (lowest + stride - 1) / stride;
  return {begin, minI64((i + pad) / stride + 1, out)};
}

// PyTorch's divisor: with count_include_pad the window is clipped to the padded input only.
APS_HOST_DEVICE inline int64_t avgDivisor(int64_t oh, int64_t ow, int64_t h, int64_t w, int64_t kernelH,
                                          int64_t kernelW, int64_t strideH, int64_t strideW, int64_t padH, int64_t padW,
                                          bool countIncludePad) {
  const int64_t hs = oh * strideH - padH, ws = ow * strideW - padW;
  const int64_t he = minI64(hs + kernelH, h + padH), we = minI64(ws + kernelW, w + padW);
  if (countIncludePad) return (he - hs) * (we - ws);
  return (minI64(he, h) - maxI64(hs, 0)) * (minI64(we, w) - maxI64(ws, 0));
}

// PyTorch's adaptive bins: [floor(i * size / out), ceil((i + 1) * size / out)).
APS_HOST_DEVICE inline Window adaptiveBin(int64_t i, int64_t size, int64_t out) {
  return {i * size / out, ((i + 1) * size + out - 1) / out};
}

// The bins (of `out`) that hold input i. Bins are monotone, so they form one range; start
// from a bound a little wider than needed and trim it with adaptiveBin itself.
APS_HOST_DEVICE inline Window adaptiveCovering(int64_t i, int64_t size, int64_t out) {
  int64_t begin = maxI64(i * out / size - 1, 0);
  int64_t end = minI64((i + 1) * out / size + 2, out);
  while (begin < end && adaptiveBin(begin, size, out).end <= i) ++begin;
  while (end > begin && adaptiveBin(end - 1, size, out).begin > i) --end;
  return {begin, end};
}

// The maximum of a window of plane x (row length w) and its flat index: the first maximum
// in scan order wins; a NaN wins and ends the scan, as in PyTorch.
APS_HOST_DEVICE inline float windowMax(const float* x, int64_t w, Window wh, Window ww, int64_t* index) {
  float best = bitCast<float>(0xff800000u);  // -infinity
  int64_t bestIndex = wh.begin * w + ww.begin;
  int64_t firstNaN = -1;
  // Selects, not branches (which value wins depends on the data), and the NaN apart: the
  // first NaN in scan order is the result if there is one, as if the scan stopped there.
  for (int64_t ih = wh.begin; ih < wh.end; ++ih) {
    for (int64_t iw = ww.begin; iw < ww.end; ++iw) {
      const int64_t i = ih * w + iw;
      const float v = x[i];
      const bool greater = v > best;  // never for a NaN
      best = greater ? v : best;
      bestIndex = greater ? i : bestIndex;
      firstNaN = firstNaN < 0 && isNaN(v) ? i : firstNaN;
    }
  }
  if (firstNaN >= 0) {
    *index = firstNaN;
    return x[firstNaN];
  }
  *index = bestIndex;
  return best;
}

// The sum of a window in scan order.
APS_HOST_DEVICE inline float windowSum(const float* x, int64_t w, Window wh, Window ww) {
  float total = 0.0f;
  for (int64_t ih = wh.begin; ih < wh.end; ++ih) {
    for (int64_t iw = ww.begin; iw < ww.end; ++iw) total += x[ih * w + iw];
  }
  return total;
}

// Max pooling's gradient at input (ih, iw) of one plane: the outputs whose argmax is this
// element, added in output order. dy and argmax are the plane's (p, q) outputs.
APS_HOST_DEVICE inline float maxPoolGradAt(const float* dy, const int64_t* argmax, int64_t ih, int64_t iw, int64_t w,
                                           int64_t p, int64_t q, int64_t kernelH, int64_t kernelW, int64_t strideH,
                                           int64_t strideW, int64_t padH, int64_t padW) {
  const Window oh = poolCovering(ih, strideH, padH, kernelH, p);
  const Window ow = poolCovering(iw, strideW, padW, kernelW, q);
  const int64_t index = ih * w + iw;
  float total = 0.0f;
  for (int64_t i = oh.begin; i < oh.end; ++i) {
    for (int64_t j = ow.begin; j < ow.end; ++j) {
      if (argmax[i * q + j] == index) total += dy[i * q + j];
    }
  }
  return total;
}

// Average pooling's gradient at input (ih, iw): each covering output's gradient over its
// divisor, added in output order.
APS_HOST_DEVICE inline float avgPoolGradAt(const float* dy, int64_t ih, int64_t iw, int64_t h, int64_t w, int64_t p,
                                           int64_t q, int64_t kernelH, int64_t kernelW, int64_t strideH,
                                           int64_t strideW, int64_t padH, int64_t padW, bool countIncludePad) {
  const Window oh = poolCovering(ih, strideH, padH, kernelH, p);
  const Window ow = poolCovering(iw, strideW, padW, kernelW, q);
  float total = 0.0f;
  for (int64_t i = oh.begin; i < oh.end; ++i) {
    for (int64_t j = ow.begin; j < ow.end; ++j) {
      const int64_t divisor = avgDivisor(i, j, h, w, kernelH, kernelW, strideH, strideW, padH, padW, countIncludePad);
      total += dy[i * q + j] / static_cast<float>(divisor);
    }
  }
  return total;
}

APS_HOST_DEVICE inline float adaptiveBinArea(Window bh, Window bw) {
  return static_cast<float>((bh.end - bh.begin) * (bw.end - bw.begin));
}

// Adaptive average pooling's gradient at input (ih, iw), gathered in output order.
APS_HOST_DEVICE inline float adaptiveAvgPoolGradAt(const float* dy, int64_t ih, int64_t iw, int64_t h, int64_t w,
                                                   int64_t outH, int64_t outW) {
  const Window oh = adaptiveCovering(ih, h, outH);
  const Window ow = adaptiveCovering(iw, w, outW);
  float total = 0.0f;
  for (int64_t i = oh.begin; i < oh.end; ++i) {
    const Window bh = adaptiveBin(i, h, outH);
    for (int64_t j = ow.begin; j < ow.end; ++j) {
      total += dy[i * outW + j] / adaptiveBinArea(bh, adaptiveBin(j, w, outW));
    }
  }
  return total;
}

}  // namespace aps::kernels
