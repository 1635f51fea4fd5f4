// Max, average and adaptive average pooling over NCHW planes, following PyTorch's CPU
// kernels (window bounds, padding divisor, adaptive bins). Work is split over (n, c)
// planes; a backward pass adds within its own plane in a fixed order, so it is
// deterministic and independent of the thread count.
#include "framework/ops/kernels/Pooling.h"
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/core/Profile.h"
#include "framework/ops/cpu/Kernels.h"
#include "framework/ops/cpu/Simd.h"

#include <algorithm>
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

using kernels::adaptiveBin;
using kernels::Window;

Window window(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t size) {
  return kernels::poolWindow(o, stride, pad, kernel, size);
}

int64_t avgDivisor(int64_t oh, int64_t ow, const Pool2dShape& s, bool countIncludePad) {
  return kernels::avgDivisor(oh, ow, s.h, s.w, s.kernelH, s.kernelW, s.strideH, s.strideW, s.padH, s.padW,
                             countIncludePad);
}

void checkAdaptive(int64_t n, int64_t c, int64_t h, int64_t w, int64_t outH, int64_t outW) {
  APS_CHECK(n >= 1 && c >= 1 && h >= 1 && w >= 1 && outH >= 1 && outW >= 1,
            "adaptive_avg_pool2d: sizes must be positive (n={}, c={}, h={}, w={}, out={}x{})", n, c, h, w, outH, outW);
}

#if defined(APS_SIMD_AVX512)
// kernels::windowMax for 16 outputs of one row at once, ow0 .. ow0 + 15, whose windows lie
// inside the row's columns (no column clipped), at column stride 1 or 2: each lane scans its
// window in the same order with the same strict comparison and keeps the first NaN, so values
// and indices are those of the scalar scan, bit for bit.
void windowMax16(float* out, int64_t* argmax, const float* x, int64_t w, kernels::Window wh, int64_t ow0,
                 const Pool2dShape& s) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(s.strideW)));
  const int64_t col0 = ow0 * s.strideW - s.padW;  // lane 0's first window column
  __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512i bestIndex = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(wh.begin * w + col0)), step);
  __m512 nanValue = _mm512_setzero_ps();
  __m512i nanIndex = _mm512_setzero_si512();
  __mmask16 nanSeen = 0;
  for (int64_t ih = wh.begin; ih < wh.end; ++ih) {
    for (int64_t kw = 0; kw < s.kernelW; ++kw) {
      const int64_t col = col0 + kw;
      const float* src = x + ih * w + col;
      __m512 v;
      if (s.strideW == 1) {
        v = _mm512_loadu_ps(src);
      } else {
        __m512 odd;
        detail::simd::deinterleave(_mm512_loadu_ps(src), _mm512_loadu_ps(src + 16), v, odd);
      }
      const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(ih * w + col)), step);
      const __mmask16 greater = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);  // never for a NaN
      best = _mm512_mask_mov_ps(best, greater, v);
      bestIndex = _mm512_mask_mov_epi32(bestIndex, greater, index);
      const __mmask16 firstNaN = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & static_cast<__mmask16>(~nanSeen);
      nanValue = _mm512_mask_mov_ps(nanValue, firstNaN, v);
      nanIndex = _mm512_mask_mov_epi32(nanIndex, firstNaN, index);
      nanSeen = static_cast<__mmask16>(nanSeen | firstNaN);
    }
  }
  _mm512_storeu_ps(out, _mm512_mask_mov_ps(best, nanSeen, nanValue));
  if (argmax != nullptr) {
    const __m512i index = _mm512_mask_mov_epi32(bestIndex, nanSeen, nanIndex);
    // The zero-masked forms: GCC 12 warns of the plain ones' undefined source operands.
    _mm512_storeu_si512(argmax, _mm512_maskz_cvtepi32_epi64(0xFF, _mm512_maskz_extracti64x4_epi64(0xFF, index, 0)));
    _mm512_storeu_si512(argmax + 8, _mm512_maskz_cvtepi32_epi64(0xFF, _mm512_maskz_extracti64x4_epi64(0xFF, index, 1)));
  }
}
#endif

}  // namespace

void maxPool2dForward(float* out, int64_t* argmax, const float* in, const Pool2dShape& shape) {
  checkPool(shape, "max_pool2d");
  const profile::Scope scope(
      "pool.forward", 0.0,
      4.0 * static_cast<double>(shape.n * shape.c * (shape.h * shape.w + shape.outH() * shape.outW())));
  const Pool2dShape& s = shape;
  const int64_t p = s.outH(), q = s.outW();
  // Indices within a plane fit the vector path's 32-bit lanes.
  [[maybe_unused]] const bool vectorRows =
      (s.strideW == 1 || s.strideW == 2) && s.h * s.w < (int64_t{1} << 31) && q >= 16;
  parallelFor(s.n * s.c, kPlaneGrain, [&](int64_t plane0, int64_t plane1) {
    for (int64_t plane = plane0; plane < plane1; ++plane) {
      const float* x = in + plane * s.h * s.w;
      for (int64_t oh = 0; oh < p; ++oh) {
        const Window wh = window(oh, s.strideH, s.padH, s.kernelH, s.h);
        for (int64_t ow = 0; ow < q; ++ow) {
#if defined(APS_SIMD_AVX512)
          // 16 outputs at once where the columns read for them (16 from each window column at
          // stride 1, 32 at stride 2) lie inside the row.
          if (vectorRows && ow + 16 <= q && ow * s.strideW - s.padW >= 0 &&
              ow * s.strideW - s.padW + s.kernelW - 1 + 16 * s.strideW - 1 < s.w) {
            windowMax16(out + plane * p * q + oh * q + ow,
                        argmax != nullptr ? argmax + plane * p * q + oh * q + ow : nullptr, x, s.w, wh, ow, s);
            ow += 15;
            continue;
          }
#endif
          const Window ww = window(ow, s.strideW, s.padW, s.kernelW, s.w);
          int64_t bestIndex = 0;
          const float best = kernels::windowMax(x, s.w, wh, ww, &bestIndex);
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
          out[plane * p * q + oh * q + ow] =
              kernels::windowSum(x, s.w, wh, ww) / static_cast<float>(avgDivisor(oh, ow, s, countIncludePad));
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
          out[(plane * outH + oh) * outW + ow] = kernels::windowSum(x, w, bh, bw) / kernels::adaptiveBinArea(bh, bw);
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
          const float g = gradOut[(plane * outH + oh) * outW + ow] / kernels::adaptiveBinArea(bh, bw);
          for (int64_t ih = bh.begin; ih < bh.end; ++ih) {
            for (int64_t iw = bw.begin; iw < bw.end; ++iw) dx[ih * w + iw] += g;
          }
        }
      }
    }
  });
}

}  // namespace aps::cpu
