#include "framework/ops/cpu/WinogradConv.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/ops/cpu/Simd.h"
#include "framework/ops/cpu/Workspace.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace aps::cpu::detail {

namespace {

using simd::kLanes;
using simd::Vec;

// F(2x2, 3x3): 2x2 output tiles read 4x4 input tiles; 16 products per tile and filter.
constexpr int64_t kPositions = 16;
// Register tile of the products' GEMMs: kRows filters x W vectors of tiles (as the panel
// convolution's: 8 filters and up to 24 accumulators on AVX-512, 4 and 12 elsewhere).
constexpr int64_t kRows = simd::kRegisters >= 32 ? 8 : 4;
constexpr int kMaxWidth = 3;
// A work item's transformed input (16 x C x tiles floats) aims for this many bytes, so that it
// stays in L2 while every filter block's GEMMs read it.
constexpr int64_t kTargetBytes = int64_t{256} << 10;
// At least this many work items per batch (when it has the tile rows), to share the work among
// several threads. One thread takes items as large as kTargetBytes allows: at one image, the
// 14 tile rows of 16 channels at 28x28 in 7 items of 2 rows took 23 us a forward, in one
// item 18 (aps_bench_ops --batch 1 --threads 1). Items never change a tile's values.
constexpr int64_t kMinItems = 8;
constexpr int64_t kMaxChannels = 64;
// Winograd pays above this many output tiles per call and channel or filter (ResNet-20 on 2
// threads: 64 channels at 7x7 break even at batch 32, 512 tiles; 32 at 14x14 lose at batch 8,
// 392 tiles, and win at 32; 16 at 28x28 win at batch 8).
constexpr int64_t kMinTilesPerChannel = 16;
// Up to kFewChannels channels and filters its transforms cost less against the products, and
// it pays above kMinTilesPerFewChannels tiles per channel: 16 at 28x28 at one image (196
// tiles), forward 18 against the direct kernel's 23 us, 16 at 24x24 (144) 14.9 against 16.4,
// at 20x20 (100) 12.4 against 13.0, at 14x14 (49) 9.7 against 6.5; 32 at 16x16 (64 tiles,
// 2 per channel) 28.7 against 27.3 (aps_bench_ops --batch 1 --threads 1). The choice
// depends on the shape only, never on the threads, so that bits never do.
constexpr int64_t kFewChannels = 16;
constexpr int64_t kMinTilesPerFewChannels = 8;

// The caller's slot (the transformed weights, read by every thread), and each thread's.
constexpr int kSlotWeights = 6;
constexpr int kSlotInput = 0;     // V: (16, C, stride) per work item
constexpr int kSlotProducts = 1;  // M: (16, kp, stride) per work item

struct Plan {
  int64_t p = 0, q = 0;    // output size
  int64_t th = 0, tw = 0;  // tile rows and columns per image
  // Lanes of V per tile row, and tile rows per vector. Rows narrower than a vector (AVX-512) are
  // packed several to a vector, each in pw = tw rounded up to a power of two lanes (4 or 8);
  // wider ones (and every row elsewhere) take pw = tw lanes from where the previous row ends, the
  // last vector spilling into the next row's lanes, which that row then overwrites.
  int64_t pw = 0, segments = 1;
  int64_t rowsPerItem = 0, items = 0;
  int64_t stride = 0;  // floats per row of V and M: an item's tiles rounded up to a vector, plus one
  int64_t kp = 0;      // filters rounded up to kRows
};

Plan makePlan(const Conv2dShape& s, int threads) {
  Plan plan;
  plan.p = s.outH();
  plan.q = s.outW();
  plan.th = (plan.p + 1) / 2;
  plan.tw = (plan.q + 1) / 2;
  const auto roundUp = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  plan.pw = plan.tw;
#if defined(APS_SIMD_AVX512)
  if (plan.tw <= kLanes / 2) {
    plan.pw = plan.tw <= 4 ? 4 : 8;
    plan.segments = kLanes / plan.pw;
  }
#endif
  const int64_t totalRows = s.n * plan.th;
  const int64_t minItems = threads > 1 ? kMinItems : 1;
  const int64_t rowsForBytes =
      std::max<int64_t>(1, kTargetBytes / (kPositions * s.c * plan.pw * static_cast<int64_t>(sizeof(float))));
  plan.rowsPerItem =
      roundUp(std::clamp<int64_t>(rowsForBytes, 1, (totalRows + minItems - 1) / minItems), plan.segments);
  plan.items = (totalRows + plan.rowsPerItem - 1) / plan.rowsPerItem;
  plan.stride = roundUp(plan.rowsPerItem * plan.pw, kLanes) + kLanes;
  // Never a power of two: V and M hold 16 x C rows of `stride` floats, and rows 512 bytes apart
  // fall into the same few L1 sets (7 tile rows of 14 tiles, 128 floats: ResNet-20's first stage
  // at 4 images a call, 73 against 55 us per image on one thread; aps_bench_ops).
  if ((plan.stride & (plan.stride - 1)) == 0) plan.stride += kLanes;
  plan.kp = roundUp(s.k, kRows);
  return plan;
}

// U (16, C, kp) <- G g G^T for every filter k and channel c (zero for k >= K), with
// G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]. g is weight[k][c] (AsGiven) or, for an
// input gradient, weight[c][k] flipped in space (FlippedTransposed).
void transformWeights(float* u, const float* weight, const Conv2dShape& s, const Plan& plan, PanelWeights layout) {
  // Threads split the channels; each writes its channels' 16 rows of kp filters in order. A
  // channel's 16 rows lie C x kp floats apart in U (16 KiB at 64 channels: the same L1 set), so
  // they are built in a local block first and copied out row by row; stored in place, one
  // value to each row in turn, they evicted one another (64 channels at one image, forward and
  // backward with Winograd forced: 365-567 us before, 151-169 after). kFilterBlock filters at a
  // time, each lane one filter, each lane's arithmetic that of one filter alone (the compiler
  // vectorises the lane loops): at one image a call, 16 channels, this was 1.3% of a simulated
  // rank's step filter by filter.
  constexpr int64_t kFilterBlock = 16;
  parallelFor(s.c, 1, [&](int64_t c0, int64_t c1) {
    alignas(64) float local[kPositions][kMaxChannels + kFilterBlock];
    for (int64_t c = c0; c < c1; ++c) {
      for (int64_t k0 = 0; k0 < s.k; k0 += kFilterBlock) {
        const int64_t kn = std::min(kFilterBlock, s.k - k0);
        alignas(64) float g[9][kFilterBlock] = {};  // [tap][filter]; zero past the last filter
        for (int64_t l = 0; l < kn; ++l) {
          const int64_t k = k0 + l;
          if (layout == PanelWeights::AsGiven) {
            const float* src = weight + (k * s.c + c) * 9;
            for (int i = 0; i < 9; ++i) g[i][l] = src[i];
          } else {
            const float* src = weight + (c * s.k + k) * 9;
            for (int i = 0; i < 9; ++i) g[i][l] = src[8 - i];
          }
        }
        alignas(64) float t[4][3][kFilterBlock];  // G g
        for (int j = 0; j < 3; ++j) {
          for (int64_t l = 0; l < kFilterBlock; ++l) {
            t[0][j][l] = g[j][l];
            t[1][j][l] = 0.5f * (g[j][l] + g[3 + j][l] + g[6 + j][l]);
            t[2][j][l] = 0.5f * (g[j][l] - g[3 + j][l] + g[6 + j][l]);
            t[3][j][l] = g[6 + j][l];
          }
        }
        for (int i = 0; i < 4; ++i) {  // (G g) G^T
          for (int64_t l = 0; l < kFilterBlock; ++l) {
            local[i * 4 + 0][k0 + l] = t[i][0][l];
            local[i * 4 + 1][k0 + l] = 0.5f * (t[i][0][l] + t[i][1][l] + t[i][2][l]);
            local[i * 4 + 2][k0 + l] = 0.5f * (t[i][0][l] - t[i][1][l] + t[i][2][l]);
            local[i * 4 + 3][k0 + l] = t[i][2][l];
          }
        }
      }
      // Filters [K, kp) are zero: the last block's lanes past K computed zeros from zeros.
      for (int64_t xi = 0; xi < kPositions; ++xi) std::copy_n(local[xi], plan.kp, u + (xi * s.c + c) * plan.kp);
    }
  });
}

// V[(xi, c)][lane] <- B^T d B for a vector of tiles, d[row][x] holding row `row` and column x
// of each lane's 4x4 input tile, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
inline void transformInput(float* v, int64_t vStride, const Vec (&d)[4][4]) {
  Vec col[4][4];  // [column x][row combination i]
  for (int x = 0; x < 4; ++x) {
    col[x][0] = simd::sub(d[0][x], d[2][x]);
    col[x][1] = simd::add(d[1][x], d[2][x]);
    col[x][2] = simd::sub(d[2][x], d[1][x]);
    col[x][3] = simd::sub(d[1][x], d[3][x]);
  }
  for (int i = 0; i < 4; ++i) {
    simd::store(v + (i * 4 + 0) * vStride, simd::sub(col[0][i], col[2][i]));
    simd::store(v + (i * 4 + 1) * vStride, simd::add(col[1][i], col[2][i]));
    simd::store(v + (i * 4 + 2) * vStride, simd::sub(col[2][i], col[1][i]));
    simd::store(v + (i * 4 + 3) * vStride, simd::sub(col[1][i], col[3][i]));
  }
}

// Column x of the tile at tx is input column 2 tx + x - padW: per input row, the even and odd
// columns from 2 tx - padW on (x = 0, 1) and from 2 tx + 2 - padW on (x = 2, 3), read with
// masked loads (zero outside the plane) and split by parity in registers.

// Tile rows [ty0, ty1) of one channel plane, pw = tw lanes per row, row ty's V at
// v + (ty - ty0) pw: whole vectors, the lanes past a row's last tile holding values of no tile,
// which the next row or the slack overwrite (the vectors of a row go last to first, each over
// all the rows, so every spill is overwritten). Consecutive tile rows share two input rows:
// each input row is loaded and split by parity once, not twice.
void transformInputRun(float* v, int64_t vStride, const float* plane, int64_t ty0, int64_t ty1, const Conv2dShape& s,
                       const Plan& plan) {
  for (int64_t u = (plan.tw - 1) / kLanes * kLanes; u >= 0; u -= kLanes) {
    // Input row y's columns x = 0..3 of each lane's tile (zero outside the plane).
    const auto loadRow = [&](Vec(&row)[4], int64_t y) {
      if (y < 0 || y >= s.h) {
        for (Vec& x : row) x = simd::zero();
        return;
      }
      const float* src = plane + y * s.w;
      for (int64_t shift = 0; shift < 2; ++shift) {
        const int64_t start = 2 * (u + shift) - s.padW;
        simd::deinterleave(simd::loadRange(src, start, s.w), simd::loadRange(src, start + kLanes, s.w), row[2 * shift],
                           row[2 * shift + 1]);
      }
    };
    Vec d[4][4];  // [input row][column x]
    loadRow(d[0], 2 * ty0 - s.padH);
    loadRow(d[1], 2 * ty0 + 1 - s.padH);
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      if (ty > ty0) {
        for (int x = 0; x < 4; ++x) d[0][x] = d[2][x], d[1][x] = d[3][x];
      }
      loadRow(d[2], 2 * ty + 2 - s.padH);
      loadRow(d[3], 2 * ty + 3 - s.padH);
      transformInput(v + (ty - ty0) * plan.pw + u, vStride, d);
    }
  }
}

#if defined(APS_SIMD_AVX512)
// plan.segments (2 or 4) tile rows of one channel in one vector, pw (8 or 4) lanes each:
// planes[j] and ys[j] are row j's channel plane (null past the item's last row) and tile row.
void transformInputRows(float* v, int64_t vStride, const float* const* planes, const int64_t* ys, const Conv2dShape& s,
                        const Plan& plan) {
  // Segments of 4 lanes: the even columns of a and b, then their odd ones, 4 of each.
  const __m512i split4 = _mm512_setr_epi32(0, 2, 4, 6, 16, 18, 20, 22, 1, 3, 5, 7, 17, 19, 21, 23);
  const __m512i low8 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
  const __m512i high8 = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  Vec d[4][4];
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t shift = 0; shift < 2; ++shift) {
      Vec a[4];  // each segment's row: 2 pw input columns from 2 shift - padW on
      for (int64_t j = 0; j < plan.segments; ++j) {
        const int64_t y = 2 * ys[j] + i - s.padH;
        a[j] = planes[j] != nullptr && y >= 0 && y < s.h ? simd::loadRange(planes[j] + y * s.w, 2 * shift - s.padW, s.w)
                                                         : simd::zero();
      }
      Vec& even = d[i][2 * shift];
      Vec& odd = d[i][2 * shift + 1];
      if (plan.segments == 2) {
        simd::deinterleave(a[0], a[1], even, odd);
      } else {
        const Vec ab = _mm512_permutex2var_ps(a[0], split4, a[1]);
        const Vec cd = _mm512_permutex2var_ps(a[2], split4, a[3]);
        even = _mm512_permutex2var_ps(ab, low8, cd);
        odd = _mm512_permutex2var_ps(ab, high8, cd);
      }
    }
  }
  transformInput(v, vStride, d);
}
#endif

// m (kRows, stride) <- u (depth, kp)^T . v (depth, stride) for W vectors of tiles: one
// position's GEMM over the channels, each product one FMA chain in channel order.
template <int W>
void productKernel(float* m, const float* u, const float* v, int64_t depth, int64_t stride, int64_t kp) {
  Vec acc[kRows][W];
  for (int64_t i = 0; i < kRows; ++i) {
    for (int w = 0; w < W; ++w) acc[i][w] = simd::zero();
  }
  for (int64_t c = 0; c < depth; ++c) {
    Vec x[W];
    for (int w = 0; w < W; ++w) x[w] = simd::load(v + c * stride + w * kLanes);
    const float* weights = u + c * kp;
    for (int64_t i = 0; i < kRows; ++i) {
      const Vec b = simd::broadcast(weights + i);
      for (int w = 0; w < W; ++w) acc[i][w] = simd::fma(b, x[w], acc[i][w]);
    }
  }
  for (int64_t i = 0; i < kRows; ++i) {
    for (int w = 0; w < W; ++w) simd::store(m + i * stride + w * kLanes, acc[i][w]);
  }
}

// Y <- A^T m A (+ bias) for a vector of tiles from their 16 products m[xi * mStride],
// A^T = [1 1 1 0; 0 1 -1 -1]: y[a][b] is output row a, column b of each lane's 2x2 tile.
inline void transformOutput(Vec (&y)[2][2], const float* m, int64_t mStride, Vec bias) {
  Vec top[4], bottom[4];  // the two rows of A^T m, per column j
  for (int j = 0; j < 4; ++j) {
    const Vec m0 = simd::load(m + j * mStride), m1 = simd::load(m + (4 + j) * mStride);
    const Vec m2 = simd::load(m + (8 + j) * mStride), m3 = simd::load(m + (12 + j) * mStride);
    top[j] = simd::add(simd::add(m0, m1), m2);
    bottom[j] = simd::sub(simd::sub(m1, m2), m3);
  }
  y[0][0] = simd::add(simd::add(simd::add(top[0], top[1]), top[2]), bias);
  y[0][1] = simd::add(simd::sub(simd::sub(top[1], top[2]), top[3]), bias);
  y[1][0] = simd::add(simd::add(simd::add(bottom[0], bottom[1]), bottom[2]), bias);
  y[1][1] = simd::add(simd::sub(simd::sub(bottom[1], bottom[2]), bottom[3]), bias);
}

// One tile row of one filter (pw = tw lanes per row): out rows 2 ty and 2 ty + 1.
void transformOutputRow(float* out, const float* m, int64_t mStride, float bias, int64_t ty, const Plan& plan) {
  float* row0 = out + 2 * ty * plan.q;
  const bool second = 2 * ty + 1 < plan.p;
  for (int64_t u = 0; u < plan.tw; u += kLanes) {
    Vec y[2][2];
    transformOutput(y, m + u, mStride, simd::splat(bias));
    const int64_t n = std::min<int64_t>(2 * kLanes, plan.q - 2 * u);
    simd::interleave(row0 + 2 * u, y[0][0], y[0][1], n);
    if (second) simd::interleave(row0 + plan.q + 2 * u, y[1][0], y[1][1], n);
  }
}

#if defined(APS_SIMD_AVX512)
// plan.segments tile rows of one filter from one vector: outs[j] is row j's output plane (null
// past the item's last row), ys[j] its tile row.
void transformOutputRows(float* const* outs, const int64_t* ys, const float* m, int64_t mStride, float bias,
                         const Plan& plan) {
  Vec y[2][2];
  transformOutput(y, m, mStride, simd::splat(bias));
  const int64_t n = std::min<int64_t>(2 * plan.pw, plan.q);  // floats of an output row
  for (int a = 0; a < 2; ++a) {
    // The interleaved row pairs: segment j's 2 pw floats start at float 2 pw j of (lo, hi).
    Vec halves[2];
    simd::zip(y[a][0], y[a][1], halves[0], halves[1]);
    for (int64_t j = 0; j < plan.segments; ++j) {
      if (outs[j] == nullptr || 2 * ys[j] + a >= plan.p) continue;
      const int64_t first = 2 * plan.pw * j;
      const int64_t lane = first % kLanes;
      const auto mask = static_cast<__mmask16>(((1u << n) - 1u) << lane);
      // Lane `lane` lands on the row's first float; the address of lane 0 is never written.
      auto* base = reinterpret_cast<float*>(reinterpret_cast<uintptr_t>(outs[j] + (2 * ys[j] + a) * plan.q) -
                                            static_cast<uintptr_t>(lane) * 4);
      _mm512_mask_storeu_ps(base, mask, halves[first / kLanes]);
    }
  }
}
#endif

}  // namespace

bool winogradEnabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("APS_WINOGRAD");
    return env == nullptr || std::string_view(env) != "0";
  }();
  return enabled;
}

bool winogradSupported(const Conv2dShape& s) {
  if (!winogradEnabled() || s.r != 3 || s.s != 3 || s.strideH != 1 || s.strideW != 1 || s.dilationH != 1 ||
      s.dilationW != 1 || s.groups != 1 || s.padH > 2 || s.padW > 2 || s.outH() < 2 || s.outW() < 2 || s.c < 8 ||
      s.c > kMaxChannels || s.k < 8 || s.k > kMaxChannels)
    return false;
  // Enough tiles to pay for what a call costs whatever its batch (the weights' transform, the
  // work items' setup), which grows with the channels and filters.
  const int64_t tiles = s.n * ((s.outH() + 1) / 2) * ((s.outW() + 1) / 2);
  const int64_t channels = std::max(s.c, s.k);
  return tiles > (channels <= kFewChannels ? kMinTilesPerFewChannels : kMinTilesPerChannel) * channels;
}

void winogradConvForward(float* out, const float* in, const float* weight, const float* bias, const Conv2dShape& s,
                         PanelWeights layout) {
  APS_ASSERT(winogradSupported(s));
  const Plan plan = makePlan(s, numThreads());
  float* u = Workspace::get(kSlotWeights, kPositions * s.c * plan.kp);
  transformWeights(u, weight, s, plan, layout);
  const int64_t totalRows = s.n * plan.th;
  const int64_t hw = s.h * s.w, pq = plan.p * plan.q;
  const int threads = static_cast<int>(std::min<int64_t>(numThreads(), plan.items));
  // With several threads the last 2 x threads items are cut in two, so that the thread that
  // finishes first waits for half an item, not a whole one. A tile's values do not depend on
  // the item that computes it.
  const int64_t whole = threads > 1 ? plan.items - std::min<int64_t>(plan.items, 2 * threads) : plan.items;
  const int64_t half = ((plan.rowsPerItem + 1) / 2 + plan.segments - 1) / plan.segments * plan.segments;
  const int64_t items = whole + 2 * (plan.items - whole);
  forEachTask(items, threads, [&](int64_t item, int) {
    const int64_t r0 = item < whole ? item * plan.rowsPerItem : whole * plan.rowsPerItem + (item - whole) * half;
    const int64_t r1 = std::min(totalRows, r0 + (item < whole ? plan.rowsPerItem : half));
    if (r0 >= r1) return;
    const int64_t tiles = (r1 - r0) * plan.pw;
    float* v = Workspace::get(kSlotInput, kPositions * s.c * plan.stride);
    float* m = Workspace::get(kSlotProducts, kPositions * plan.kp * plan.stride);
    // V for every channel and tile row, rows in order so each row's spill is overwritten.
    for (int64_t c = 0; c < s.c; ++c) {
      if (plan.segments == 1) {
        // A run of tile rows per image.
        for (int64_t r = r0; r < r1;) {
          const int64_t image = r / plan.th, ty0 = r % plan.th, ty1 = std::min(plan.th, ty0 + (r1 - r));
          transformInputRun(v + c * plan.stride + (r - r0) * plan.pw, s.c * plan.stride, in + (image * s.c + c) * hw,
                            ty0, ty1, s, plan);
          r += ty1 - ty0;
        }
        continue;
      }
      for (int64_t r = r0; r < r1; r += plan.segments) {
#if defined(APS_SIMD_AVX512)
        float* vRow = v + c * plan.stride + (r - r0) * plan.pw;
        const float* planes[4] = {};
        int64_t ys[4] = {};
        for (int64_t j = 0; j < plan.segments && r + j < r1; ++j) {
          planes[j] = in + ((r + j) / plan.th * s.c + c) * hw;
          ys[j] = (r + j) % plan.th;
        }
        transformInputRows(vRow, s.c * plan.stride, planes, ys, s, plan);
#endif
      }
    }
    // The lanes past the last tile, which the GEMMs' last vectors read, hold zeros.
    for (int64_t row = 0; row < kPositions * s.c; ++row)
      simd::fillZero(v + row * plan.stride + tiles, plan.stride - tiles);
    // The 16 GEMMs over the channels, position by position (its V rows stay in L1 while every
    // block of kRows filters reads them), then the output tiles of every filter.
    for (int64_t xi = 0; xi < kPositions; ++xi) {
      const float* vXi = v + xi * s.c * plan.stride;
      for (int64_t k0 = 0; k0 < s.k; k0 += kRows) {
        const float* uXi = u + xi * s.c * plan.kp + k0;
        float* mXi = m + (xi * plan.kp + k0) * plan.stride;
        for (int64_t g = 0; g < tiles;) {
          const int64_t rest = tiles - g;
          if (rest > 2 * kLanes) {
            productKernel<kMaxWidth>(mXi + g, uXi, vXi + g, s.c, plan.stride, plan.kp);
            g += kMaxWidth * kLanes;
          } else if (rest > kLanes) {
            productKernel<2>(mXi + g, uXi, vXi + g, s.c, plan.stride, plan.kp);
            g += 2 * kLanes;
          } else {
            productKernel<1>(mXi + g, uXi, vXi + g, s.c, plan.stride, plan.kp);
            g += kLanes;
          }
        }
      }
    }
    for (int64_t k = 0; k < s.k; ++k) {
      const float b = bias != nullptr ? bias[k] : 0.0f;
      for (int64_t r = r0; r < r1; r += plan.segments) {
        const float* mRow = m + k * plan.stride + (r - r0) * plan.pw;
        if (plan.segments == 1) {
          transformOutputRow(out + (r / plan.th * s.k + k) * pq, mRow, plan.kp * plan.stride, b, r % plan.th, plan);
          continue;
        }
#if defined(APS_SIMD_AVX512)
        float* outs[4] = {};
        int64_t ys[4] = {};
        for (int64_t j = 0; j < plan.segments && r + j < r1; ++j) {
          outs[j] = out + ((r + j) / plan.th * s.k + k) * pq;
          ys[j] = (r + j) % plan.th;
        }
        transformOutputRows(outs, ys, mRow, plan.kp * plan.stride, b, plan);
#endif
      }
    }
  });
}

}  // namespace aps::cpu::detail
