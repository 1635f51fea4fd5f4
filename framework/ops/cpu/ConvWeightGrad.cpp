#include "framework/ops/cpu/ConvWeightGrad.h"

#include "framework/core/Parallel.h"
#include "framework/ops/cpu/PanelConv.h"
#include "framework/ops/cpu/Workspace.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define APS_WGRAD_AVX2 1
#endif

namespace aps::cpu::detail {

namespace {

constexpr int64_t kRows = 4;  // filters per dot block
// im2col rows per dot block: 4 x 2 accumulators plus 4 + 2 operands fit the 16 registers.
constexpr int kMaxTaps = 2;  // dotBlock is written for at most two
constexpr int64_t kWeightChunks = 16;

// Per-thread workspace slots (columns of one channel, gradOut of the chunk) and the
// calling thread's partials.
constexpr int kSlotColumns = 0;
constexpr int kSlotGradRows = 1;
constexpr int kSlotPartials = 2;
constexpr int kSlotAccumulators = 3;
constexpr int kSlotPaddedInput = 4;  // the calling thread's, read by all
// Pixels walked per block: the block's gradOut rows and im2col rows stay in L1 while every
// (filter block, tap group) pair passes over them, instead of streaming from L2 each time.
constexpr int64_t kPixelBlock = 256;

inline float reduceLanes(const float* lanes) {
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

// acc[i][t] (8 lanes each) += dy[i][j] * x[t][j] for j in [begin, end) (multiples of 8);
// dy rows 32-byte aligned, x rows (shifted input windows on the direct path) unaligned. The accumulators stay in memory
// between calls so that the pixels can be walked in L1-sized blocks without changing any lane's FMA chain.
template <int T>
inline void dotBlock(float* acc, const float* const* dy, const float* const* x, int64_t begin, int64_t end) {
#ifdef APS_WGRAD_AVX2
  __m256 a[kRows][T];
  for (int64_t i = 0; i < kRows; ++i) {
    for (int t = 0; t < T; ++t) a[i][t] = _mm256_load_ps(acc + (i * kMaxTaps + t) * 8);
  }
  for (int64_t j = begin; j < end; j += 8) {
    // Keep every operand in a register: left alone, GCC folds loads into the FMAs as
    // memory operands (12 loads per 8 FMAs instead of 6) and the loop becomes load-bound.
    __m256 x0 = _mm256_loadu_ps(x[0] + j);
    asm("" : "+x"(x0));
    __m256 x1 = x0;
    if constexpr (T > 1) {
      x1 = _mm256_loadu_ps(x[1] + j);
      asm("" : "+x"(x1));
    }
    for (int64_t i = 0; i < kRows; ++i) {
      __m256 d = _mm256_load_ps(dy[i] + j);
      asm("" : "+x"(d));
      a[i][0] = _mm256_fmadd_ps(d, x0, a[i][0]);
      if constexpr (T > 1) a[i][T - 1] = _mm256_fmadd_ps(d, x1, a[i][T - 1]);
    }
  }
  for (int64_t i = 0; i < kRows; ++i) {
    for (int t = 0; t < T; ++t) _mm256_store_ps(acc + (i * kMaxTaps + t) * 8, a[i][t]);
  }
#else
  for (int64_t i = 0; i < kRows; ++i) {
    for (int t = 0; t < T; ++t) {
      float* lanes = acc + (i * kMaxTaps + t) * 8;
      for (int64_t j = begin; j < end; ++j) lanes[j % 8] += dy[i][j] * x[t][j];
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
            // Short rows: inline loops beat calls to memcpy/memset.
            for (int64_t ow = 0; ow < qlo; ++ow) dst[ow] = 0.0f;
            for (int64_t ow = qlo; ow < qhi; ++ow) dst[ow] = src[iw0 + ow];
            for (int64_t ow = qhi; ow < q; ++ow) dst[ow] = 0.0f;
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

  // Direct path (unit stride): no im2col. With gradOut laid out over the zero-padded row
  // width (p * Wp + q, zero where q >= Q), the im2col row of tap (r, t) is the padded input
  // plane itself shifted by r * dH * Wp + t * dW. It wastes the Wp - Q extra columns, so it
  // is taken where that costs less than writing im2col rows (measured: 28x28 and 14x14 maps
  // with 16-32 filters; not 7x7).
  const int64_t wp = s.w + 2 * s.padW, planeSize = (s.h + 2 * s.padH) * wp;
  const int64_t directLength = (p * wp + 7) / 8 * 8;
  const bool direct = s.strideH == 1 && s.strideW == 1 && directLength * 100 <= pq * 120;
  const float* padded = nullptr;
  std::vector<int64_t> tapOffset(static_cast<size_t>(rs));
  if (direct) {
    float* buffer = Workspace::get(kSlotPaddedInput, s.n * s.c * planeSize + 16 + s.dilationW * (s.s - 1));
    padPlanes(buffer, in, s.n * s.c, s.h, s.w, s.padH, s.padW, 16 + s.dilationW * (s.s - 1));
    padded = buffer;
    for (int64_t r = 0; r < s.r; ++r) {
      for (int64_t t = 0; t < s.s; ++t)
        tapOffset[static_cast<size_t>(r * s.s + t)] = r * s.dilationH * wp + t * s.dilationW;
    }
  }

  const int threads = static_cast<int>(std::min<int64_t>(numThreads(), chunks));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t n0 = chunk * imagesPerChunk;
    const int64_t images = std::min(s.n, n0 + imagesPerChunk) - n0;
    // Segments the pixel loop walks: one per image on the direct path (rows of directLength),
    // or one for the whole chunk over concatenated im2col rows.
    const int64_t segments = direct ? images : 1;
    const int64_t length = direct ? directLength : (images * pq + 7) / 8 * 8;
    // gradOut of the chunk: rows (filter k, segment) of `length` floats, zero where unused.
    float* dyRows = Workspace::get(kSlotGradRows, s.k * segments * length);
    for (int64_t k = 0; k < s.k; ++k) {
      for (int64_t b = 0; b < images; ++b) {
        const float* src = gradOut + ((n0 + b) * s.k + k) * pq;
        if (direct) {
          float* row = dyRows + (k * segments + b) * length;
          for (int64_t oh = 0; oh < p; ++oh) {
            for (int64_t ow = 0; ow < q; ++ow) row[oh * wp + ow] = src[oh * q + ow];
            for (int64_t ow = q; ow < wp; ++ow) row[oh * wp + ow] = 0.0f;
          }
          std::fill(row + p * wp, row + length, 0.0f);
        } else {
          float* row = dyRows + k * length;
          for (int64_t i = 0; i < pq; ++i) row[b * pq + i] = src[i];
        }
      }
      if (!direct) std::fill(dyRows + k * length + images * pq, dyRows + (k + 1) * length, 0.0f);
    }
    float* col = direct ? nullptr : Workspace::get(kSlotColumns, rs * length);
    float* partial = partials + chunk * weightSize;
    // Lane accumulators of every (filter block, tap group) of one channel.
    const int64_t filterBlocks = (kg + kRows - 1) / kRows, tapGroups = (rs + kMaxTaps - 1) / kMaxTaps;
    constexpr int64_t kAccSize = kRows * kMaxTaps * 8;
    float* acc = Workspace::get(kSlotAccumulators, filterBlocks * tapGroups * kAccSize);
    for (int64_t g = 0; g < s.groups; ++g) {
      for (int64_t c = 0; c < cg; ++c) {
        if (!direct) channelColumns(col, length, in + n0 * s.c * s.h * s.w, images, g * cg + c, s, p, q);
        std::fill(acc, acc + filterBlocks * tapGroups * kAccSize, 0.0f);
        for (int64_t segment = 0; segment < segments; ++segment) {
          const float* plane = direct ? padded + ((n0 + segment) * s.c + g * cg + c) * planeSize : nullptr;
          for (int64_t j0 = 0; j0 < length; j0 += kPixelBlock) {
            const int64_t j1 = std::min(length, j0 + kPixelBlock);
            for (int64_t block = 0; block < filterBlocks; ++block) {
              const int64_t k0 = block * kRows;
              const float* dy[kRows];
              // Past the group's last filter, reuse its first; those results are discarded.
              for (int64_t i = 0; i < kRows; ++i) {
                dy[i] = dyRows + ((g * kg + (k0 + i < kg ? k0 + i : k0)) * segments + segment) * length;
              }
              for (int64_t group = 0; group < tapGroups; ++group) {
                const int64_t t0 = group * kMaxTaps;
                const float* x[kMaxTaps];
                for (int64_t t = 0; t < kMaxTaps; ++t) {
                  const int64_t tap = std::min(t0 + t, rs - 1);
                  x[t] = direct ? plane + tapOffset[static_cast<size_t>(tap)] : col + tap * length;
                }
                float* a = acc + (block * tapGroups + group) * kAccSize;
                if (rs - t0 >= 2) {
                  dotBlock<2>(a, dy, x, j0, j1);
                } else {
                  dotBlock<1>(a, dy, x, j0, j1);
                }
              }
            }
          }
        }
        for (int64_t block = 0; block < filterBlocks; ++block) {
          for (int64_t group = 0; group < tapGroups; ++group) {
            const int64_t t0 = group * kMaxTaps;
            const float* a = acc + (block * tapGroups + group) * kAccSize;
            for (int64_t i = 0; i < kRows && block * kRows + i < kg; ++i) {
              float* w = partial + (g * kg + block * kRows + i) * kd + c * rs + t0;
              for (int64_t t = 0; t < std::min<int64_t>(kMaxTaps, rs - t0); ++t) {
                w[t] = reduceLanes(a + (i * kMaxTaps + t) * 8);
              }
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
