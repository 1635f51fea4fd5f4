#include "framework/ops/cpu/ConvWeightGrad.h"

#include "framework/core/Parallel.h"
#include "framework/ops/cpu/Workspace.h"

#include <algorithm>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define APS_WGRAD_AVX2 1
#endif

namespace aps::cpu::detail {

namespace {

constexpr int64_t kRows = 4;  // filters per dot block
constexpr int kMaxTaps = 3;   // im2col rows per dot block: 4 x 3 accumulators fill 12 registers
constexpr int64_t kWeightChunks = 16;

// Per-thread workspace slots (columns of one channel, gradOut of the chunk) and the
// calling thread's partials.
constexpr int kSlotColumns = 0;
constexpr int kSlotGradRows = 1;
constexpr int kSlotPartials = 2;

inline float reduceLanes(const float* lanes) {
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

// result[i * T + t] = sum_j dy[i][j] * x[t][j] over `length` (a multiple of 8) floats of
// 32-byte aligned rows.
template <int T>
inline void dotBlock(float* result, const float* const* dy, const float* const* x, int64_t length) {
#ifdef APS_WGRAD_AVX2
  __m256 acc[kRows][T];
  for (auto& row : acc) {
    for (auto& a : row) a = _mm256_setzero_ps();
  }
  for (int64_t j = 0; j < length; j += 8) {
    __m256 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm256_load_ps(x[t] + j);
    for (int64_t i = 0; i < kRows; ++i) {
      const __m256 d = _mm256_load_ps(dy[i] + j);
      for (int t = 0; t < T; ++t) acc[i][t] = _mm256_fmadd_ps(d, xv[t], acc[i][t]);
    }
  }
  for (int64_t i = 0; i < kRows; ++i) {
    for (int t = 0; t < T; ++t) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[i][t]);
      result[i * T + t] = reduceLanes(lanes);
    }
  }
#else
  for (int64_t i = 0; i < kRows; ++i) {
    for (int t = 0; t < T; ++t) {
      float lanes[8] = {};
      for (int64_t j = 0; j < length; ++j) lanes[j % 8] += dy[i][j] * x[t][j];
      result[i * T + t] = reduceLanes(lanes);
    }
  }
#endif
}

// col (R*S, length) <- im2col rows of input channel `channel` over `images` images starting
// at `in`, pixels of consecutive images concatenated, zero past images * P * Q.
void channelColumns(float* col, int64_t length, const float* in, int64_t images, int64_t channel, const Conv2dShape& s,
                    int64_t p, int64_t q) {
  const int64_t pq = p * q, hw = s.h * s.w;
  for (int64_t r = 0; r < s.r; ++r) {
    for (int64_t t = 0; t < s.s; ++t) {
      float* row = col + (r * s.s + t) * length;
      const int64_t iw0 = t * s.dilationW - s.padW;  // input column of output column 0
      const int64_t qlo = s.strideW == 1 ? std::clamp<int64_t>(-iw0, 0, q) : 0;
      const int64_t qhi = s.strideW == 1 ? std::clamp<int64_t>(s.w - iw0, qlo, q) : 0;
      for (int64_t b = 0; b < images; ++b) {
        const float* plane = in + (b * s.c + channel) * hw;
        float* dst = row + b * pq;
        for (int64_t oh = 0; oh < p; ++oh, dst += q) {
          const int64_t ih = oh * s.strideH - s.padH + r * s.dilationH;
          if (ih < 0 || ih >= s.h) {
            std::fill(dst, dst + q, 0.0f);
            continue;
          }
          const float* src = plane + ih * s.w;
          if (s.strideW == 1) {
            std::fill(dst, dst + qlo, 0.0f);
            std::memcpy(dst + qlo, src + iw0 + qlo, static_cast<size_t>(qhi - qlo) * sizeof(float));
            std::fill(dst + qhi, dst + q, 0.0f);
          } else {
            for (int64_t ow = 0; ow < q; ++ow) {
              const int64_t iw = ow * s.strideW + iw0;
              dst[ow] = iw >= 0 && iw < s.w ? src[iw] : 0.0f;
            }
          }
        }
      }
      std::fill(row + images * pq, row + length, 0.0f);
    }
  }
}

}  // namespace

void convWeightGrad(float* gradWeight, const float* gradOut, const float* in, const Conv2dShape& shape) {
  const Conv2dShape& s = shape;
  const int64_t p = s.outH(), q = s.outW(), pq = p * q;
  const int64_t cg = s.c / s.groups, kg = s.k / s.groups, rs = s.r * s.s, kd = cg * rs;
  const int64_t weightSize = s.k * kd;
  const int64_t imagesPerChunk = (s.n + kWeightChunks - 1) / kWeightChunks;
  const int64_t chunks = (s.n + imagesPerChunk - 1) / imagesPerChunk;
  float* partials = Workspace::get(kSlotPartials, chunks * weightSize);
  const int threads = static_cast<int>(std::min<int64_t>(numThreads(), chunks));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t n0 = chunk * imagesPerChunk;
    const int64_t images = std::min(s.n, n0 + imagesPerChunk) - n0;
    const int64_t length = (images * pq + 7) / 8 * 8;
    // gradOut of the chunk as K rows of images * P * Q pixels (zero tail).
    float* dyRows = Workspace::get(kSlotGradRows, s.k * length);
    for (int64_t k = 0; k < s.k; ++k) {
      float* row = dyRows + k * length;
      for (int64_t b = 0; b < images; ++b) {
        std::memcpy(row + b * pq, gradOut + ((n0 + b) * s.k + k) * pq, static_cast<size_t>(pq) * sizeof(float));
      }
      std::fill(row + images * pq, row + length, 0.0f);
    }
    float* col = Workspace::get(kSlotColumns, rs * length);
    float* partial = partials + chunk * weightSize;
    for (int64_t g = 0; g < s.groups; ++g) {
      for (int64_t c = 0; c < cg; ++c) {
        channelColumns(col, length, in + n0 * s.c * s.h * s.w, images, g * cg + c, s, p, q);
        for (int64_t k0 = 0; k0 < kg; k0 += kRows) {
          const float* dy[kRows];
          // Past the group's last filter, reuse its first; those results are discarded.
          for (int64_t i = 0; i < kRows; ++i) dy[i] = dyRows + (g * kg + (k0 + i < kg ? k0 + i : k0)) * length;
          for (int64_t t0 = 0; t0 < rs; t0 += kMaxTaps) {
            const int taps = static_cast<int>(std::min<int64_t>(kMaxTaps, rs - t0));
            const float* x[kMaxTaps];
            for (int t = 0; t < taps; ++t) x[t] = col + (t0 + t) * length;
            float result[kRows * kMaxTaps];
            if (taps == 3) {
              dotBlock<3>(result, dy, x, length);
            } else if (taps == 2) {
              dotBlock<2>(result, dy, x, length);
            } else {
              dotBlock<1>(result, dy, x, length);
            }
            for (int64_t i = 0; i < kRows && k0 + i < kg; ++i) {
              float* w = partial + (g * kg + k0 + i) * kd + c * rs + t0;
              for (int t = 0; t < taps; ++t) w[t] = result[i * taps + t];
            }
          }
        }
      }
    }
  }
  parallelFor(weightSize, 1024, [&](int64_t i0, int64_t i1) {
    std::copy(partials + i0, partials + i1, gradWeight + i0);
    for (int64_t chunk = 1; chunk < chunks; ++chunk) {
      const float* part = partials + chunk * weightSize;
      for (int64_t i = i0; i < i1; ++i) gradWeight[i] += part[i];
    }
  });
}

}  // namespace aps::cpu::detail
