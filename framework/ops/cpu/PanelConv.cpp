#include "framework/ops/cpu/PanelConv.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/ops/cpu/Simd.h"
#include "framework/ops/cpu/Workspace.h"

#include <algorithm>

namespace aps::cpu::detail {

namespace {

using simd::kLanes;
using simd::Vec;

// Register tile: kRows filters x W vectors of output pixels, W = 1 to kMaxWidth; each
// broadcast weight meets W pixel vectors. Eight filters on AVX-512 (up to 24 of its 32
// registers hold accumulators), four elsewhere (12 of 16).
constexpr int64_t kRows = simd::kRegisters >= 32 ? 8 : 4;
constexpr int kMaxWidth = 3;
constexpr int64_t kMaxCols = kMaxWidth * kLanes;  // tile row stride
constexpr int64_t kSlack = 8;                     // floats of zero tail past the padded input
constexpr int64_t kTilesPerTask = 4;

// Caller-thread workspace slots, read by every thread.
constexpr int kSlotPaddedInput = 4;
constexpr int kSlotOffsets = 5;
constexpr int kSlotImages = 7;  // an image's padded planes per thread

// tile (kRows, W * kLanes; row stride kMaxCols) <- a (depth, kRows)^T * b (depth, W * kLanes).
// Nothing is packed: row d of b is the padded input itself at base + offsets[d], and a's
// element (d, i) is the weight at filters[i] + weightOffsets[d] (filters[i]: filter i's first
// weight; the two layouts of PanelWeights differ only in these offsets). Each broadcast reads
// its weight where it lies.
template <int W>
void microKernel(float* tile, const float* const* filters, const int64_t* weightOffsets, const float* base,
                 const int64_t* offsets, int64_t depth) {
  Vec c[kRows][W];
  for (int64_t i = 0; i < kRows; ++i) {
    for (int w = 0; w < W; ++w) c[i][w] = simd::zero();
  }
  const float* f[kRows];
  for (int64_t i = 0; i < kRows; ++i) f[i] = filters[i];
  for (int64_t d = 0; d < depth; ++d) {
    const float* b = base + offsets[d];
    const int64_t o = weightOffsets[d];
    Vec x[W];
    for (int w = 0; w < W; ++w) x[w] = simd::load(b + w * kLanes);
    for (int64_t i = 0; i < kRows; ++i) {
      const Vec v = simd::broadcast(f[i] + o);
      for (int w = 0; w < W; ++w) c[i][w] = simd::fma(v, x[w], c[i][w]);
    }
  }
  for (int64_t i = 0; i < kRows; ++i) {
    for (int w = 0; w < W; ++w) simd::store(tile + i * kMaxCols + w * kLanes, c[i][w]);
  }
}

// row (wp floats) <- padW zeros, src (w floats), zeros to the end.
inline void padRow(float* row, const float* src, int64_t w, int64_t padW, int64_t wp) {
  simd::fillZero(row, padW);
  simd::copy(row + padW, src, w);
  simd::fillZero(row + padW + w, wp - padW - w);
}

struct Geometry {
  int64_t p, q, pq, cg, kg, kd, blocks;  // blocks: kRows-filter blocks per group
  // The zero-padded input, each plane split into strideH x strideW phases (a, b) holding its
  // rows a, a + strideH, ... and columns b, b + strideW, ...: (phases, hp, wp) per channel, so
  // that the pixels of an output row read consecutive floats at any stride.
  int64_t hp, wp, planeSize;
  bool direct;            // stride 1 with little waste: read the padded input in place
  int64_t directWidth;    // direct path: tile width in vectors, 1 to kMaxWidth
  int64_t directColumns;  // direct path: columns per block (rows * wp, rounded up to the tile)
  // A block of `images` images stacked in one tall plane per channel (unit stride, same-size
  // output): image b's rows start at row padH + b * pitch, the padH zero rows after each image
  // serving as the bottom border of one and the top border of the next. Output row t of the
  // block (t < rows) is image t / pitch's row t % pitch, real where t % pitch < P. One image:
  // pitch = hp, rows = P, the plane as above.
  int64_t images, pitch, rows;
};

// Whether images can be stacked (Geometry): unit stride and an output the input's height, so
// that padH zero rows between images are both borders.
bool stackable(const Conv2dShape& s) { return s.strideH == 1 && s.strideW == 1 && s.outH() == s.h; }

// Where the weights lie (nothing is packed): filter i of group g, tap d, is
// weight[g * groupStride + i * filterStride + weightOffsets[d]].
struct WeightLayout {
  int64_t groupStride, filterStride;
};

// PanelWeights::AsGiven: weight (K, kd), tap d at d.
// PanelWeights::FlippedTransposed, for the convolution t of an input gradient (Conv2d.cpp):
// weight (t.c, t.k / groups, R, S) of the convolution it differentiates; filter c of t, tap
// (k, r, u), is that weight's [g * t.cg + k][c][R-1-r][S-1-u].
WeightLayout weightOffsets(int64_t* weightOffsets, const Conv2dShape& s, const Geometry& geo, PanelWeights layout) {
  if (layout == PanelWeights::AsGiven) {
    for (int64_t d = 0; d < geo.kd; ++d) weightOffsets[d] = d;
    return {geo.kg * geo.kd, geo.kd};
  }
  const int64_t rs = s.r * s.s;
  for (int64_t k = 0; k < geo.cg; ++k) {
    for (int64_t j = 0; j < rs; ++j) weightOffsets[k * rs + j] = k * geo.kg * rs + rs - 1 - j;
  }
  return {geo.cg * geo.kg * rs, rs};
}

// offsets[d] for d = (c, r, t): where that filter tap reads, relative to the output pixel's
// top-left input corner in the padded input.
void tapOffsets(int64_t* offsets, const Conv2dShape& s, const Geometry& geo) {
  const int64_t rs = s.r * s.s;
  for (int64_t r = 0; r < s.r; ++r) {
    for (int64_t t = 0; t < s.s; ++t) {
      const int64_t y = r * s.dilationH, x = t * s.dilationW;
      const int64_t phase = y % s.strideH * s.strideW + x % s.strideW;
      offsets[r * s.s + t] = phase * geo.hp * geo.wp + y / s.strideH * geo.wp + x / s.strideW;
    }
  }
  for (int64_t c = 1; c < geo.cg; ++c) {
    for (int64_t tap = 0; tap < rs; ++tap) offsets[c * rs + tap] = c * geo.planeSize + offsets[tap];
  }
}

// Writes rows [0, rows) of a tile to out (+ bias): `columns` consecutive output pixels of
// image n starting at pixel pq0, taken from tile columns [first, first + columns) with a
// tile column stride of 1 pixel per column, skipping none.
inline void storeRun(float* out, const float* tile, int64_t first, int64_t columns, int64_t rows, int64_t kFirst,
                     const float* bias, int64_t planeStride) {
  for (int64_t i = 0; i < rows; ++i) {
    float* dst = out + i * planeStride;
    const float* src = tile + i * kMaxCols + first;
    const float b = bias != nullptr ? bias[kFirst + i] : 0.0f;
    for (int64_t x = 0; x < columns; ++x) dst[x] = src[x] + b;
  }
}

// Direct path: the block of images from image n, tile index within the block; columns are
// padded-width pixels t * wp + q of the block's output rows t < rows, of which q < Q in real
// rows are outputs.
// `image`: the block's padded planes, followed by what a tile may read past them.
void directTile(float* out, const float* image, const float* weight, const WeightLayout& wl,
                const int64_t* weightOffsets, const float* bias, const int64_t* offsets, int64_t n, int64_t tileInImage,
                int64_t rows, const Conv2dShape& s, const Geometry& geo) {
  alignas(64) float tile[kRows * kMaxCols];
  const int64_t width = geo.directWidth * kLanes;
  const int64_t j0 = tileInImage * width;
  for (int64_t g = 0; g < s.groups; ++g) {
    const float* base = image + g * geo.cg * geo.planeSize + j0;
    for (int64_t block = 0; block < geo.blocks; ++block) {
      // A block past the group's last filter repeats that filter; its rows are not stored.
      const float* filters[kRows];
      for (int64_t i = 0; i < kRows; ++i) {
        filters[i] = weight + g * wl.groupStride + std::min(block * kRows + i, geo.kg - 1) * wl.filterStride;
      }
      if (geo.directWidth == 3) {
        microKernel<3>(tile, filters, weightOffsets, base, offsets, geo.kd);
      } else if (geo.directWidth == 2) {
        microKernel<2>(tile, filters, weightOffsets, base, offsets, geo.kd);
      } else {
        microKernel<1>(tile, filters, weightOffsets, base, offsets, geo.kd);
      }
      const int64_t kFirst = g * geo.kg + block * kRows;
      const int64_t count = std::min(kRows, geo.kg - block * kRows);
      for (int64_t j = j0; j < j0 + width;) {
        const int64_t t = j / geo.wp, q = j % geo.wp;
        if (t >= rows) break;
        const int64_t b = t / geo.pitch, p = t % geo.pitch;
        const int64_t length = std::min(geo.wp - q, j0 + width - j);
        const int64_t real = p < geo.p ? std::max<int64_t>(0, std::min(length, geo.q - q)) : 0;
        if (real > 0) {
          storeRun(out + ((n + b) * s.k + kFirst) * geo.pq + p * geo.q + q, tile, j - j0, real, count, kFirst, bias,
                   geo.pq);
        }
        j += length;
      }
    }
  }
}

// The time of a tile `width` vectors wide per column, relative to the widest: a one-vector
// tile issues a load and eight broadcasts per eight FMAs and runs at about 60% of a wider one
// (ResNet-20's 16-channel 28x28 layers: 848 columns at width 1, 864 at width 2 or 3, and width
// 1 took 1.5-2x as long, `aps_bench_ops --layer conv_16to16_28`); two- and three-vector tiles
// run alike (its 14x14 layers: 224 columns at width 2 ran 5-10% faster than 240 at width 3;
// the stride-2 layers of 3x32x32: 288 columns at width 3 15-20% faster than 272 at width 1).
double tileCost(int width) { return width == 1 ? 1.6 : 1.0; }

// The geometry of `images` stacked images (stackable shapes only, when more than one), with
// tiles `width` vectors wide (0: chosen as below).
Geometry makeGeometry(const Conv2dShape& s, int64_t images = 1, int width = 0) {
  Geometry geo{};
  geo.p = s.outH();
  geo.q = s.outW();
  geo.pq = geo.p * geo.q;
  geo.cg = s.c / s.groups;
  geo.kg = s.k / s.groups;
  geo.kd = geo.cg * s.r * s.s;
  geo.blocks = (geo.kg + kRows - 1) / kRows;
  geo.hp = (s.h + 2 * s.padH + s.strideH - 1) / s.strideH;
  geo.wp = (s.w + 2 * s.padW + s.strideW - 1) / s.strideW;
  geo.planeSize = s.strideH * s.strideW * geo.hp * geo.wp;
  geo.images = images;
  geo.pitch = geo.hp;
  geo.rows = geo.p;
  if (images > 1) {
    APS_ASSERT(stackable(s));
    geo.pitch = s.h + s.padH;
    geo.rows = images * geo.pitch - s.padH;
    geo.planeSize = (s.padH + images * geo.pitch) * geo.wp;
  }
  // The direct path computes outputs over the padded width (wasting wp - Q columns per
  // row) and whole tiles per image; take it when that waste is small, since it packs nothing.
  // Packing short rows costs more than computing up to 60% extra columns (measured on
  // ResNet-20's 7x7 maps: direct with 64 columns for 49 pixels beats packing).
  // The tile width with the fewest columns weighted by tileCost, the widest among equals.
  double best = 0.0;
  for (int w = 1; w <= kMaxWidth; ++w) {
    const int64_t columns = (geo.rows * geo.wp + w * kLanes - 1) / (w * kLanes) * (w * kLanes);
    const double cost = static_cast<double>(columns) * tileCost(w);
    if (width == 0 ? w == 1 || cost <= best : w == width) {
      geo.directWidth = w;
      geo.directColumns = columns;
      best = cost;
    }
  }
  // Strided kernels narrower than the stride (1x1 projections) would copy phases they never
  // read: im2col reads only the pixels it needs.
  geo.direct = geo.directColumns * 100 <= geo.pq * 160 && s.r >= s.strideH && s.s >= s.strideW;
  return geo;
}

// padded <- input planes [plane0, plane1) zero-padded and split into phases (Geometry),
// plane i at padded + i * planeSize.
void padPhasePlanes(float* padded, const float* in, int64_t plane0, int64_t plane1, const Conv2dShape& s,
                    const Geometry& geo) {
  for (int64_t plane = plane0; plane < plane1; ++plane) {
    const float* src = in + plane * s.h * s.w;
    float* dst = padded + plane * geo.planeSize;
    for (int64_t a = 0; a < s.strideH; ++a) {
      for (int64_t b = 0; b < s.strideW; ++b, dst += geo.hp * geo.wp) {
        for (int64_t y = 0; y < geo.hp; ++y) {
          float* row = dst + y * geo.wp;
          const int64_t ih = y * s.strideH + a - s.padH;
          if (ih < 0 || ih >= s.h) {
            std::fill(row, row + geo.wp, 0.0f);
            continue;
          }
          for (int64_t x = 0; x < geo.wp; ++x) {
            const int64_t iw = x * s.strideW + b - s.padW;
            row[x] = iw >= 0 && iw < s.w ? src[ih * s.w + iw] : 0.0f;
          }
        }
      }
    }
  }
}

// padded <- planes [plane0, plane1) of `in` padded as the panel kernel reads them: zero
// borders at unit stride, zero borders and stride phases otherwise (plane i at padded + i * planeSize).
void padRange(float* padded, const float* in, int64_t plane0, int64_t plane1, const Conv2dShape& s,
              const Geometry& geo) {
  if (s.strideH == 1 && s.strideW == 1) {
    padPlaneRange(padded, in, plane0, plane1, s.h, s.w, s.padH, s.padW);
  } else {
    padPhasePlanes(padded, in, plane0, plane1, s, geo);
  }
}

// padded <- images [0, count) of `in` (N, C, h, w) stacked as Geometry says, channel c's
// tall plane at padded + c * planeSize: zero borders, padH zero rows between images.
void padStacked(float* padded, const float* in, int64_t count, const Conv2dShape& s, const Geometry& geo) {
  const int64_t wp = geo.wp, gap = s.padH * wp;
  for (int64_t c = 0; c < s.c; ++c) {
    float* dst = padded + c * geo.planeSize;
    std::fill(dst, dst + gap, 0.0f);
    for (int64_t b = 0; b < count; ++b) {
      const float* src = in + (b * s.c + c) * s.h * s.w;
      float* rows = dst + (s.padH + b * geo.pitch) * wp;
      for (int64_t y = 0; y < s.h; ++y) {
        padRow(rows + y * wp, src + y * s.w, s.w, s.padW, wp);
      }
      std::fill(rows + s.h * wp, rows + s.h * wp + gap, 0.0f);
    }
  }
}

// Images per stacked block for the per-image path, and the tile width: the fewest columns
// computed per output pixel, weighted by tileCost. Several images only where that saves at
// least 3% against one image at makeGeometry's width, at most 8 (the block stays in cache),
// and at least two blocks per thread.
struct Stacking {
  int64_t images;
  int width;
};
Stacking stacking(const Conv2dShape& s, int64_t threads) {
  const auto cost = [&](const Geometry& g) {
    return static_cast<double>(g.directColumns) * tileCost(static_cast<int>(g.directWidth)) /
           static_cast<double>(g.images * g.pq);
  };
  Stacking best{1, 0};
  if (!stackable(s)) return best;
  double bestCost = cost(makeGeometry(s)) * 0.97;
  const int64_t most = std::clamp<int64_t>(threads == 1 ? s.n : s.n / (2 * threads), 1, 8);
  for (int64_t images = 2; images <= most; ++images) {
    for (int width = 1; width <= kMaxWidth; ++width) {
      const double c = cost(makeGeometry(s, images, width));
      if (c < bestCost) {
        best = {images, width};
        bestCost = c;
      }
    }
  }
  return best;
}

}  // namespace

void padPlaneRange(float* padded, const float* in, int64_t plane0, int64_t plane1, int64_t h, int64_t w, int64_t padH,
                   int64_t padW) {
  const int64_t wp = w + 2 * padW, planeSize = (h + 2 * padH) * wp;
  for (int64_t plane = plane0; plane < plane1; ++plane) {
    float* dst = padded + plane * planeSize;
    const float* src = in + plane * h * w;
    std::fill(dst, dst + padH * wp, 0.0f);
    for (int64_t y = 0; y < h; ++y) {
      padRow(dst + (padH + y) * wp, src + y * w, w, padW, wp);
    }
    std::fill(dst + (padH + h) * wp, dst + planeSize, 0.0f);
  }
}

bool panelConvSupported(const Conv2dShape& shape) { return makeGeometry(shape).direct; }

void panelConvForward(float* out, const float* in, const float* weight, const float* bias, const Conv2dShape& shape,
                      PanelWeights layout) {
  const Conv2dShape& s = shape;
  const Geometry geo = makeGeometry(s);
  APS_ASSERT(geo.direct);

  const int64_t available = numThreads();
  const bool perImage = available == 1 || s.n >= 2 * available;
  // The geometry the tiles read: a block of stacked images on the per-image path.
  const Stacking stack = perImage ? stacking(s, available) : Stacking{1, 0};
  const int64_t images = stack.images;
  const Geometry blk = images > 1 ? makeGeometry(s, images, stack.width) : geo;

  // The tap offsets of the input and of the weights (int64 storage in a float buffer).
  auto* offsets = reinterpret_cast<int64_t*>(Workspace::get(kSlotOffsets, geo.kd * 4));
  int64_t* wOffsets = offsets + geo.kd;
  tapOffsets(offsets, s, blk);
  const WeightLayout wl = weightOffsets(wOffsets, s, geo, layout);
  // Over-wide direct tiles read up to a tile (plus the filter's reach) past the last pixel.
  const int64_t tail = kSlack + blk.directColumns;
  const int64_t imageSize = s.c * geo.planeSize;
  const int64_t tileWidth = blk.directWidth * kLanes;

  if (perImage) {
    // A block of images per task: each thread pads the block into its own buffer and
    // computes all of its tiles while the padded planes are in its cache, instead of one pass
    // padding the whole batch to memory and another reading it back. Small maps stack several
    // images in one tall plane (Geometry), so that wider register tiles run over them. The
    // same FMA chains, so the same bits.
    // The threads' buffers are taken here, on the calling thread: a worker thread's first
    // allocation would give it a heap arena of its own (megabytes of resident memory).
    const int64_t blocks = (s.n + images - 1) / images;
    const int threads = static_cast<int>(std::min<int64_t>(available, blocks));
    const int64_t blockSize = s.c * blk.planeSize;
    const int64_t stride = (blockSize + tail + 15) / 16 * 16;  // 64-byte aligned buffers
    float* buffers = Workspace::get(kSlotImages, threads * stride);
    // Padding never writes past a block's planes: each buffer's tail is zeroed once.
    for (int t = 0; t < threads; ++t)
      std::fill(buffers + t * stride + blockSize, buffers + t * stride + blockSize + tail, 0.0f);
    forEachTask(blocks, threads, [&](int64_t block, int thread) {
      float* image = buffers + thread * stride;
      const int64_t n = block * images, count = std::min(images, s.n - n);
      if (images > 1) {
        padStacked(image, in + n * s.c * s.h * s.w, count, s, blk);
      } else {
        padRange(image, in + n * s.c * s.h * s.w, 0, s.c, s, geo);
      }
      const int64_t rows = images > 1 ? count * blk.pitch - s.padH : geo.p;
      const int64_t tiles = (rows * blk.wp + tileWidth - 1) / tileWidth;
      for (int64_t tile = 0; tile < tiles; ++tile) {
        directTile(out, image, weight, wl, wOffsets, bias, offsets, n, tile, rows, s, blk);
      }
    });
    return;
  }

  // Fewer images than tasks for the threads: the whole batch padded first, tiles shared out.
  float* padded = Workspace::get(kSlotPaddedInput, s.n * imageSize + tail);
  parallelFor(s.n * s.c, 8, [&](int64_t plane0, int64_t plane1) { padRange(padded, in, plane0, plane1, s, geo); });
  std::fill(padded + s.n * imageSize, padded + s.n * imageSize + tail, 0.0f);
  const int64_t tilesPerImage = geo.directColumns / tileWidth;
  const int64_t tiles = s.n * tilesPerImage;
  const int64_t tasks = (tiles + kTilesPerTask - 1) / kTilesPerTask;
  const int threads = static_cast<int>(std::min<int64_t>(available, tasks));
  forEachTask(tasks, threads, [&](int64_t task, int) {
    const int64_t last = std::min(tiles, (task + 1) * kTilesPerTask);
    for (int64_t tile = task * kTilesPerTask; tile < last; ++tile) {
      const int64_t n = tile / tilesPerImage;
      directTile(out, padded + n * imageSize, weight, wl, wOffsets, bias, offsets, n, tile % tilesPerImage, geo.p, s,
                 geo);
    }
  });
}

}  // namespace aps::cpu::detail
