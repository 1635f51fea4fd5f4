#include "framework/ops/cpu/ConvWeightGrad.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/ops/cpu/PanelConv.h"
#include "framework/ops/cpu/Simd.h"
#include "framework/ops/cpu/Workspace.h"

#include <algorithm>

namespace aps::cpu::detail {

namespace {

using simd::kLanes;
using simd::Vec;

// Taps per tile are rounded up to a multiple of this; the extra taps repeat the last one
// into accumulator rows past the real ones, which are dropped.
constexpr int kTapStep = 2;

// Pixels per block: each thread walks the batch a block of whole images at a time and runs
// all of its tiles over a block before the next, so the block's transposed gradOut and padded
// input are read from memory once per thread and from its cache by every further tile.
constexpr int64_t kBlockPixels = 256;

// Workspace slots of the calling thread, used by all: each thread's transposed gradOut of a
// block of images, the accumulators, the tap offsets and each thread's padded block of images
// (the slot PanelConv.cpp pads its images into).
constexpr int kSlotGradRows = 1;
constexpr int kSlotAccumulators = 2;
constexpr int kSlotOffsets = 3;
constexpr int kSlotImages = 7;

// Taps per tile for V vectors of filters: V x T accumulators plus V gradOut vectors and a
// broadcast must fit the registers; beyond 16 taps the offsets no longer fit in registers.
template <int V>
constexpr int maxTaps() {
  return std::min(16, (simd::kRegisters - V - 1) / V / kTapStep * kTapStep);
}
constexpr int kMaxVectors = simd::kRegisters >= 32 ? 4 : 2;
constexpr int kMinTaps = 4;

// The output pixels of one chunk and group, row by row: row i (image i / P, output row
// i % P) reads the padded input from row(i), pixel j of it at row(i) + j * strideW.
struct Pixels {
  const float* base;
  int64_t imageStride, rowsPerImage, rowStride, q, strideW;
  const float* row(int64_t i) const { return base + (i / rowsPerImage) * imageStride + (i % rowsPerImage) * rowStride; }
};

// acc (T taps, V * kLanes filters; row stride ldAcc) += (or = where `first`) the sum over
// the pixels of `rows` of x[tap][pixel] * dy[pixel][filter]: an outer product per pixel, the taps
// broadcast from the padded input at their offsets and the filters loaded from the
// transposed gradOut (ldDy floats per pixel). Each accumulator lane is one FMA chain over
// the pixels in order, and no lanes are ever summed across.
template <int T, int V>
void outerTile(float* acc, int64_t ldAcc, bool first, const float* dy, int64_t ldDy, const Pixels& px, int64_t rows,
               const int64_t* offsets) {
  Vec a[T][V];
  for (int i = 0; i < T; ++i) {
    for (int v = 0; v < V; ++v) a[i][v] = first ? simd::zero() : simd::load(acc + i * ldAcc + v * kLanes);
  }
  int64_t o[T];
  for (int i = 0; i < T; ++i) o[i] = offsets[i];
  for (int64_t row = 0; row < rows; ++row) {
    const float* x = px.row(row);
    for (int64_t j = 0; j < px.q; ++j, x += px.strideW, dy += ldDy) {
      Vec d[V];
      for (int v = 0; v < V; ++v) d[v] = simd::load(dy + v * kLanes);
      for (int i = 0; i < T; ++i) {
        const Vec b = simd::broadcast(x + o[i]);
        for (int v = 0; v < V; ++v) a[i][v] = simd::fma(b, d[v], a[i][v]);
      }
    }
  }
  for (int i = 0; i < T; ++i) {
    for (int v = 0; v < V; ++v) simd::store(acc + i * ldAcc + v * kLanes, a[i][v]);
  }
}

// outerTile with the fewest taps (a multiple of kTapStep, at most T) covering `taps`.
template <int T, int V>
void outerTiles(int64_t taps, float* acc, int64_t ldAcc, bool first, const float* dy, int64_t ldDy, const Pixels& px,
                int64_t rows, const int64_t* offsets) {
  if constexpr (T > kTapStep) {
    if (taps <= T - kTapStep) {
      outerTiles<T - kTapStep, V>(taps, acc, ldAcc, first, dy, ldDy, px, rows, offsets);
      return;
    }
  }
  outerTile<T, V>(acc, ldAcc, first, dy, ldDy, px, rows, offsets);
}

// outerTiles for `vectors` (1 to kMaxVectors) filter vectors.
void outerTilesFor(int64_t vectors, int64_t taps, float* acc, int64_t ldAcc, bool first, const float* dy, int64_t ldDy,
                   const Pixels& px, int64_t rows, const int64_t* offsets) {
  switch (vectors) {
    case 1:
      outerTiles<maxTaps<1>(), 1>(taps, acc, ldAcc, first, dy, ldDy, px, rows, offsets);
      break;
    case 2:
      outerTiles<maxTaps<2>(), 2>(taps, acc, ldAcc, first, dy, ldDy, px, rows, offsets);
      break;
#if APS_SIMD_AVX512
    case 3:
      outerTiles<maxTaps<3>(), 3>(taps, acc, ldAcc, first, dy, ldDy, px, rows, offsets);
      break;
    case 4:
      outerTiles<maxTaps<4>(), 4>(taps, acc, ldAcc, first, dy, ldDy, px, rows, offsets);
      break;
#endif
    default:
      APS_ASSERT(false);
  }
}

// Where a row tile's filter rows read the input, output row by output row: Rows pointers, x[i]
// to column 0 of filter row i's input row as the padded input has it (x[i] + u is the column
// that the row's first tap reads for pixel u). `edges` says whether columns 0 and q + 1 (which
// only the first and last pixels' outer taps read) are read at all.
//
// PaddedRows reads the zero-padded input at the tap offsets.
struct PaddedRows {
  Pixels px;
  const int64_t* offsets;  // the tile's taps' offsets: filter row i's first at offsets[3 i]
  static constexpr bool edges = true;
  template <int Rows>
  void at(int64_t row, const float* (&x)[Rows]) const {
    const float* base = px.row(row);
    for (int i = 0; i < Rows; ++i) x[i] = base + offsets[3 * i];
  }
};

// DirectRows reads the input itself where its border is at most one column wide: a filter row
// whose input row lies outside the image reads a row of zeros, as it would from the padded copy,
// and with a one-column border the first and last steps of a row (which read only that border)
// are left out: a product with zero adds zero to a sum that is never -0, so the bits are those
// of the padded copy for finite values. No copy is made, by any thread.
struct DirectRows {
  const float* images;  // the block's first image
  int64_t imageStride, p, h, w, strideH;
  const int64_t* planes;  // per filter row: its channel's plane offset, less the border column
  const int64_t* shifts;  // per filter row: its input row relative to the output row's first
  const float* zeros;     // w + 2 zeros
  bool edges;             // no border column
  template <int Rows>
  void at(int64_t row, const float* (&x)[Rows]) const {
    const float* image = images + row / p * imageStride;
    const int64_t y = row % p * strideH;
    for (int i = 0; i < Rows; ++i) {
      const int64_t iy = y + shifts[i];
      x[i] = iy >= 0 && iy < h ? image + planes[i] + iy * w : zeros;
    }
  }
};

// rowTile: outerTile for unit horizontal stride and dilation and filter rows three taps wide,
// over Rows whole filter rows (taps 3i, 3i + 1, 3i + 2 of the tile read x at x_i, x_i + 1,
// x_i + 2). Pixel j's tap 3i + t reads the input at x_i + j + t, so the input at u serves
// pixel u with tap 3i, pixel u - 1 with tap 3i + 1 and pixel u - 2 with tap 3i + 2: one
// broadcast per filter row feeds three outer-product rows (a third of outerTile's broadcasts),
// the last three pixels' gradOut vectors held in registers. Each accumulator still takes the
// pixels in order, one FMA each: the same chains, so the same bits as outerTile.
template <int Rows, int V, typename Source>
void rowTile(float* acc, int64_t ldAcc, bool first, const float* dy, int64_t ldDy, const Source& src, int64_t q,
             int64_t rows) {
  Vec a[Rows][3][V];
  for (int i = 0; i < Rows; ++i) {
    for (int t = 0; t < 3; ++t) {
      for (int v = 0; v < V; ++v) {
        a[i][t][v] = first ? simd::zero() : simd::load(acc + (3 * i + t) * ldAcc + v * kLanes);
      }
    }
  }
  // step<T0, T1>(u, d): the input at u times gradOut vectors d[t] for taps t in [T0, T1].
  const auto step = [&]<int T0, int T1>(const float* const(&x)[Rows], int64_t u, const Vec(&d)[3][V]) {
    for (int i = 0; i < Rows; ++i) {
      const Vec b = simd::broadcast(x[i] + u);
      for (int t = T0; t <= T1; ++t) {
        for (int v = 0; v < V; ++v) a[i][t][v] = simd::fma(b, d[t][v], a[i][t][v]);
      }
    }
  };
  for (int64_t row = 0; row < rows; ++row, dy += q * ldDy) {
    const float* x[Rows];
    src.at(row, x);
    // d[t]: the gradOut of pixel u - t.
    Vec d[3][V];
    for (int v = 0; v < V; ++v) d[0][v] = simd::load(dy + v * kLanes);
    if (src.edges) step.template operator()<0, 0>(x, 0, d);
    for (int v = 0; v < V; ++v) d[1][v] = d[0][v], d[0][v] = simd::load(dy + ldDy + v * kLanes);
    step.template operator()<0, 1>(x, 1, d);
    for (int64_t u = 2; u < q; ++u) {
      for (int v = 0; v < V; ++v) {
        d[2][v] = d[1][v], d[1][v] = d[0][v], d[0][v] = simd::load(dy + u * ldDy + v * kLanes);
      }
      step.template operator()<0, 2>(x, u, d);
    }
    for (int v = 0; v < V; ++v) d[2][v] = d[1][v], d[1][v] = d[0][v];
    step.template operator()<1, 2>(x, q, d);
    for (int v = 0; v < V; ++v) d[2][v] = d[1][v];
    if (src.edges) step.template operator()<2, 2>(x, q + 1, d);
  }
  for (int i = 0; i < Rows; ++i) {
    for (int t = 0; t < 3; ++t) {
      for (int v = 0; v < V; ++v) simd::store(acc + (3 * i + t) * ldAcc + v * kLanes, a[i][t][v]);
    }
  }
}

// Filter rows per rowTile for V vectors: 3 V accumulators per row, plus 3 V gradOut vectors and
// a broadcast, within the registers.
template <int V>
constexpr int maxRows() {
  return std::min(8, (simd::kRegisters - 3 * V - 1) / (3 * V));
}

// rowTile over `filterRows` (1 to maxRows<V>()) filter rows.
template <int V, typename Source, int R = maxRows<V>()>
void rowTiles(int64_t filterRows, float* acc, int64_t ldAcc, bool first, const float* dy, int64_t ldDy,
              const Source& src, int64_t q, int64_t rows) {
  if constexpr (R > 1) {
    if (filterRows < R) {
      rowTiles<V, Source, R - 1>(filterRows, acc, ldAcc, first, dy, ldDy, src, q, rows);
      return;
    }
  }
  rowTile<R, V>(acc, ldAcc, first, dy, ldDy, src, q, rows);
}

// rowTiles for `vectors` (1 or 2) filter vectors.
template <typename Source>
void rowTilesFor(int64_t vectors, int64_t filterRows, float* acc, int64_t ldAcc, bool first, const float* dy,
                 int64_t ldDy, const Source& src, int64_t q, int64_t rows) {
  if (vectors == 1) {
    rowTiles<1>(filterRows, acc, ldAcc, first, dy, ldDy, src, q, rows);
  } else {
    APS_ASSERT(vectors == 2);
    rowTiles<2>(filterRows, acc, ldAcc, first, dy, ldDy, src, q, rows);
  }
}

// Taps per tile for `vectors` filter vectors: the tile count split over the threads in as
// few rounds as possible, with the largest tile among equals (fewer gradOut loads per FMA).
// Row tiles (rowTile) take whole filter rows of three taps.
int64_t tapsPerTile(int64_t vectors, int64_t kd, int64_t otherTiles, int64_t threads, bool rowTiles) {
  const int64_t most = rowTiles       ? 3 * (vectors == 1 ? maxRows<1>() : maxRows<2>())
                       : vectors == 1 ? maxTaps<1>()
                       : vectors == 2 ? maxTaps<2>()
                       : vectors == 3 ? maxTaps<3>()
                                      : maxTaps<4>();
  const int64_t step = rowTiles ? 3 : kTapStep;
  int64_t best = most;
  double bestCost = 0.0;
  for (int64_t taps = most; taps >= std::min<int64_t>(most, kMinTaps); taps -= step) {
    const int64_t tiles = otherTiles * ((kd + taps - 1) / taps);
    const int64_t rounds = (tiles + threads - 1) / threads;
    // Per pixel, a tile costs its FMAs plus about two cycles of loop and gradOut loads.
    const double cost = static_cast<double>(rounds * (std::min(taps, kd) * vectors + 2));
    if (taps == most || cost < bestCost) {
      best = taps;
      bestCost = cost;
    }
  }
  return best;
}

// dst (cols, ldDst) <- src (rows, cols; row stride ldSrc) transposed, zero in columns
// [rows, ldDst) of dst.
void transpose(float* dst, int64_t ldDst, const float* src, int64_t ldSrc, int64_t rows, int64_t cols) {
  const int64_t r8 = rows / 8 * 8, c8 = cols / 8 * 8;
  for (int64_t r0 = 0; r0 < r8; r0 += 8) {
    for (int64_t c0 = 0; c0 < c8; c0 += 8)
      simd::transpose8x8(dst + c0 * ldDst + r0, ldDst, src + r0 * ldSrc + c0, ldSrc);
  }
  for (int64_t c = 0; c < cols; ++c) {
    float* row = dst + c * ldDst;
    for (int64_t r = c >= c8 ? 0 : r8; r < rows; ++r) row[r] = src[r * ldSrc + c];
    for (int64_t r = rows; r < ldDst; ++r) row[r] = 0.0f;
  }
}

}  // namespace

void convWeightGrad(float* gradWeight, const float* gradOut, const float* in, const Conv2dShape& shape) {
  const Conv2dShape& s = shape;
  const int64_t p = s.outH(), q = s.outW(), pq = p * q;
  const int64_t cg = s.c / s.groups, kg = s.k / s.groups, rs = s.r * s.s, kd = cg * rs;
  // The accumulators are the weight gradient transposed, (group, tap, filter), with the
  // filters padded to whole vectors and kTapStep spare tap rows, so that a tile's
  // accumulators are whole rows.
  const int64_t kPad = (kg + kLanes - 1) / kLanes * kLanes, kdPad = kd + kTapStep;
  float* acc = Workspace::get(kSlotAccumulators, s.groups * kdPad * kPad);

  // Row tiles (rowTile) where the filter rows are three taps wide at unit horizontal stride and
  // dilation, for up to two filter vectors (with more, outerTile loads fewer broadcasts per FMA
  // already).
  const int64_t vectors = kPad / kLanes;
  const bool rowTiles = s.s == 3 && s.strideW == 1 && s.dilationW == 1 && q >= 2 && vectors <= 2;
  // The taps read the zero-padded input: the input itself where there is no padding, or where
  // row tiles read it with a border of at most one column (DirectRows), otherwise each thread
  // pads the channels its tiles read, a block of images at a time, into its own buffer.
  const bool direct = rowTiles && s.padW <= 1;
  const bool padding = !direct && (s.padH != 0 || s.padW != 0);
  const int64_t wp = padding ? s.w + 2 * s.padW : s.w, planeSize = padding ? (s.h + 2 * s.padH) * wp : s.h * s.w;
  const int64_t imageFloats = s.c * planeSize;
  // offsets[(c, r, t)]: where tap (c, r, t) of a pixel reads, relative to the pixel's
  // top-left (padded) input corner; the spare taps repeat the last.
  auto* offsets = reinterpret_cast<int64_t*>(Workspace::get(kSlotOffsets, 2 * (kdPad + 2 * kd)));
  for (int64_t c = 0; c < cg; ++c) {
    for (int64_t r = 0; r < s.r; ++r) {
      for (int64_t t = 0; t < s.s; ++t) {
        offsets[(c * s.r + r) * s.s + t] = c * planeSize + r * s.dilationH * wp + t * s.dilationW;
      }
    }
  }
  std::fill(offsets + kd, offsets + kdPad, offsets[kd - 1]);
  // DirectRows' filter rows (c, r): planes[c R + r], the plane less the border column, and
  // shifts[c R + r], the input row relative to the output row's first.
  int64_t* planes = offsets + kdPad;
  int64_t* shifts = planes + kd;
  for (int64_t row = 0; row < cg * s.r && direct; ++row) {
    planes[row] = row / s.r * planeSize - s.padW;
    shifts[row] = row % s.r * s.dilationH - s.padH;
  }

  // Tiles: (group, filter vectors, taps), each thread a contiguous range of them. Their sizes
  // only decide which thread computes which weights, never the order of any weight's FMAs.
  const int64_t vectorsPerTile = std::min<int64_t>(kMaxVectors, vectors);
  const int64_t filterTiles = (vectors + vectorsPerTile - 1) / vectorsPerTile;
  const int threads = numThreads();
  const int64_t taps = tapsPerTile(vectorsPerTile, kd, s.groups * filterTiles, threads, rowTiles);
  const int64_t tapTiles = (kd + taps - 1) / taps;
  const int64_t tiles = s.groups * filterTiles * tapTiles;
  const int team = static_cast<int>(std::min<int64_t>(threads, tiles));

  const int64_t imagesPerBlock = std::clamp<int64_t>((kBlockPixels + pq - 1) / pq, 1, s.n);
  // The threads' buffers are taken here, on the calling thread (PanelConv.cpp says why).
  const int64_t bufferStride = (imagesPerBlock * imageFloats + 15) / 16 * 16;
  float* buffers = padding ? Workspace::get(kSlotImages, team * bufferStride) : nullptr;
  float* zeros = direct ? Workspace::get(kSlotImages, s.w + 2) : nullptr;
  if (direct) std::fill(zeros, zeros + s.w + 2, 0.0f);

  // Each thread transposes the gradOut of a block's images that its tiles read, (group, pixel,
  // filter) over the filter vectors [vLo, vHi) of the groups [gLo, gHi], into its own buffer,
  // just before its tiles read it from its cache: no transposed copy of the batch is written to
  // memory and read back, and no thread waits for another until the end.
  const int64_t gradStride = (imagesPerBlock * s.groups * pq * kPad + 15) / 16 * 16;
  float* gradBuffers = Workspace::get(kSlotGradRows, team * gradStride);
  forEachTask(team, team, [&](int64_t me, int) {
    const int64_t members = team;
    const int64_t first = tiles * me / members, last = tiles * (me + 1) / members;
    const auto tileAt = [&](int64_t tile) {
      struct {
        int64_t g, v0, t0;
      } at{tile / (filterTiles * tapTiles), tile / tapTiles % filterTiles * vectorsPerTile, tile % tapTiles * taps};
      return at;
    };
    // The input channels [cLo, cHi) that this thread's tiles read: outer tiles read their
    // taps rounded up to kTapStep (the spare tap rows repeat the last tap), row tiles their own;
    // and the groups and filter vectors of gradOut they read.
    int64_t cLo = s.c, cHi = 0, gLo = s.groups, gHi = 0, vLo = vectors, vHi = 0;
    for (int64_t tile = first; tile < last; ++tile) {
      const auto at = tileAt(tile);
      const int64_t tileTaps = std::min(taps, kd - at.t0);
      const int64_t read = rowTiles ? tileTaps : (tileTaps + kTapStep - 1) / kTapStep * kTapStep;
      const int64_t lastTap = std::min(at.t0 + read, kd) - 1;
      cLo = std::min(cLo, at.g * cg + at.t0 / rs);
      cHi = std::max(cHi, at.g * cg + lastTap / rs + 1);
      gLo = std::min(gLo, at.g);
      gHi = std::max(gHi, at.g + 1);
      vLo = std::min(vLo, at.v0);
      vHi = std::max(vHi, std::min(vectors, at.v0 + vectorsPerTile));
    }
    float* buffer = padding ? buffers + me * bufferStride : nullptr;
    float* dyT = gradBuffers + me * gradStride;
    const int64_t ldDy = (vHi - vLo) * kLanes;
    const int64_t filter0 = vLo * kLanes, filters = std::min(kg, vHi * kLanes) - filter0;
    for (int64_t b0 = 0; b0 < s.n && first < last; b0 += imagesPerBlock) {
      const int64_t blockImages = std::min(imagesPerBlock, s.n - b0);
      // gradOut of the block transposed, (group, pixel, filter), zero past the filters.
      for (int64_t g = gLo; g < gHi; ++g) {
        for (int64_t b = 0; b < blockImages; ++b) {
          transpose(dyT + ((g - gLo) * blockImages + b) * pq * ldDy, ldDy,
                    gradOut + ((b0 + b) * s.k + g * kg + filter0) * pq, pq, filters, pq);
        }
      }
      const float* block = in + b0 * imageFloats;
      if (padding) {
        for (int64_t b = 0; b < blockImages; ++b) {
          padPlaneRange(buffer + b * imageFloats + cLo * planeSize, in + ((b0 + b) * s.c + cLo) * s.h * s.w, 0,
                        cHi - cLo, s.h, s.w, s.padH, s.padW);
        }
        block = buffer;
      }
      for (int64_t tile = first; tile < last; ++tile) {
        const auto at = tileAt(tile);
        const Pixels px{block + at.g * cg * planeSize, imageFloats, p, s.strideH * wp, q, s.strideW};
        float* tileAcc = acc + (at.g * kdPad + at.t0) * kPad + at.v0 * kLanes;
        const float* tileDy = dyT + (at.g - gLo) * blockImages * pq * ldDy + (at.v0 - vLo) * kLanes;
        const int64_t tileVectors = std::min(vectorsPerTile, vectors - at.v0), tileTaps = std::min(taps, kd - at.t0);
        const int64_t rows = blockImages * p;
        if (direct) {
          const DirectRows src{px.base, imageFloats, p, s.h, s.w, s.strideH, planes + at.t0 / 3, shifts + at.t0 / 3,
                               zeros,   s.padW == 0};
          rowTilesFor(tileVectors, tileTaps / 3, tileAcc, kPad, b0 == 0, tileDy, ldDy, src, q, rows);
        } else if (rowTiles) {
          const PaddedRows src{px, offsets + at.t0};
          rowTilesFor(tileVectors, tileTaps / 3, tileAcc, kPad, b0 == 0, tileDy, ldDy, src, q, rows);
        } else {
          outerTilesFor(tileVectors, tileTaps, tileAcc, kPad, b0 == 0, tileDy, ldDy, px, rows, offsets + at.t0);
        }
      }
    }
  });
  // gradWeight (K, kd) <- the accumulators transposed back.
  parallelFor(s.groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) transpose(gradWeight + g * kg * kd, kd, acc + g * kdPad * kPad, kPad, kd, kg);
  });
}

}  // namespace aps::cpu::detail
