// The convolution kernels (forward, input gradient, weight gradient) against a plain loop in
// double, over shapes that reach every path the planner picks and every tile tail: channel
// and filter counts off the register tiles, 1x1/3x3/7x7 kernels, strides, padding,
// dilation, groups, batches of 1 to 5, odd and 7x7 maps.
#include "framework/core/Parallel.h"
#include "framework/ops/cpu/Kernels.h"
#include "framework/ops/cpu/WinogradConv.h"
#include "tests/common/RandomVector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

using aps::cpu::Conv2dShape;
using aps::testsupport::randomVector;

struct Case {
  int64_t n, c, h, w, k, r, s, stride, pad, dilation, groups;
};

Conv2dShape shapeOf(const Case& t) {
  Conv2dShape s;
  s.n = t.n, s.c = t.c, s.h = t.h, s.w = t.w, s.k = t.k, s.r = t.r, s.s = t.s;
  s.strideH = s.strideW = t.stride;
  s.padH = s.padW = t.pad;
  s.dilationH = s.dilationW = t.dilation;
  s.groups = t.groups;
  return s;
}

std::string name(const Case& t) {
  std::ostringstream out;
  out << "n" << t.n << " c" << t.c << " " << t.h << "x" << t.w << " k" << t.k << " " << t.r << "x" << t.s << " stride"
      << t.stride << " pad" << t.pad << " dilation" << t.dilation << " groups" << t.groups;
  return out.str();
}

// Each output of the three passes as a double sum, with the sum of its terms' magnitudes
// (the scale of float rounding error in any summation order).
struct Reference {
  std::vector<double> y, yScale, gx, gxScale, gw, gwScale;
};

Reference reference(const Conv2dShape& s, const std::vector<float>& x, const std::vector<float>& w,
                    const std::vector<float>& b, const std::vector<float>& dy) {
  const int64_t p = s.outH(), q = s.outW(), cg = s.c / s.groups, kg = s.k / s.groups;
  Reference ref;
  ref.y.assign(dy.size(), 0.0);
  ref.yScale.assign(dy.size(), 0.0);
  ref.gx.assign(x.size(), 0.0);
  ref.gxScale.assign(x.size(), 0.0);
  ref.gw.assign(w.size(), 0.0);
  ref.gwScale.assign(w.size(), 0.0);
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t k = 0; k < s.k; ++k) {
      const int64_t g = k / kg;
      for (int64_t oh = 0; oh < p; ++oh) {
        for (int64_t ow = 0; ow < q; ++ow) {
          const size_t yi = static_cast<size_t>(((n * s.k + k) * p + oh) * q + ow);
          ref.y[yi] = b[static_cast<size_t>(k)];
          ref.yScale[yi] = std::fabs(b[static_cast<size_t>(k)]);
          for (int64_t c = 0; c < cg; ++c) {
            for (int64_t r = 0; r < s.r; ++r) {
              for (int64_t t = 0; t < s.s; ++t) {
                const int64_t ih = oh * s.strideH - s.padH + r * s.dilationH;
                const int64_t iw = ow * s.strideW - s.padW + t * s.dilationW;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                const size_t xi = static_cast<size_t>(((n * s.c + g * cg + c) * s.h + ih) * s.w + iw);
                const size_t wi = static_cast<size_t>(((k * cg + c) * s.r + r) * s.s + t);
                const double xv = x[xi], wv = w[wi], dv = dy[yi];
                ref.y[yi] += xv * wv;
                ref.yScale[yi] += std::fabs(xv * wv);
                ref.gx[xi] += dv * wv;
                ref.gxScale[xi] += std::fabs(dv * wv);
                ref.gw[wi] += dv * xv;
                ref.gwScale[wi] += std::fabs(dv * xv);
              }
            }
          }
        }
      }
    }
  }
  return ref;
}

void expectNear(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& scale,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tolerance = 1e-5 * scale[i] + 1e-6;
    if (std::fabs(got[i] - want[i]) > tolerance && reported++ < 5) {
      ADD_FAILURE() << what << " [" << i << "]: " << got[i] << " vs " << want[i] << " (tolerance " << tolerance << ")";
    }
  }
}

// Every pass of one shape against the reference, and the same bits again on a second call.
void check(const Case& t) {
  const Conv2dShape s = shapeOf(t);
  const std::vector<float> x = randomVector(static_cast<size_t>(s.n * s.c * s.h * s.w), 1);
  const std::vector<float> w = randomVector(static_cast<size_t>(s.k * s.c / s.groups * s.r * s.s), 2);
  const std::vector<float> b = randomVector(static_cast<size_t>(s.k), 3);
  const std::vector<float> dy = randomVector(static_cast<size_t>(s.n * s.k * s.outH() * s.outW()), 4);
  const Reference ref = reference(s, x, w, b, dy);
  std::vector<float> y(dy.size()), gx(x.size()), gw(w.size());
  for (int call = 0; call < 2; ++call) {
    // NaN where a kernel fails to write.
    std::vector<float> y2(dy.size(), NAN), gx2(x.size(), NAN), gw2(w.size(), NAN);
    aps::cpu::conv2dForward(y2.data(), x.data(), w.data(), b.data(), s);
    aps::cpu::conv2dBackward(gx2.data(), gw2.data(), nullptr, dy.data(), x.data(), w.data(), s);
    if (call == 0) {
      expectNear(y2, ref.y, ref.yScale, name(t) + " forward");
      expectNear(gx2, ref.gx, ref.gxScale, name(t) + " input gradient");
      expectNear(gw2, ref.gw, ref.gwScale, name(t) + " weight gradient");
      y = y2, gx = gx2, gw = gw2;
    } else {
      EXPECT_EQ(0, std::memcmp(y.data(), y2.data(), y.size() * sizeof(float))) << name(t) << " forward bits";
      EXPECT_EQ(0, std::memcmp(gx.data(), gx2.data(), gx.size() * sizeof(float))) << name(t) << " input gradient bits";
      EXPECT_EQ(0, std::memcmp(gw.data(), gw2.data(), gw.size() * sizeof(float))) << name(t) << " weight gradient bits";
    }
  }
}

// n, c, h, w, k, r, s, stride, pad, dilation, groups
const Case kCases[] = {
    // ResNet layers: the first convolution, 28x28/14x14/7x7 3x3, projections.
    {2, 1, 28, 28, 16, 3, 3, 1, 1, 1, 1},
    {3, 3, 32, 32, 16, 3, 3, 1, 1, 1, 1},
    {2, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1},
    {2, 16, 28, 28, 32, 3, 3, 2, 1, 1, 1},
    {3, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1},
    {4, 64, 7, 7, 64, 3, 3, 1, 1, 1, 1},
    {2, 16, 28, 28, 32, 1, 1, 2, 0, 1, 1},
    {1, 3, 23, 23, 64, 7, 7, 2, 3, 1, 1},
    // Filter counts off the vector tiles (1 to 5 vectors and tails), channel counts off the
    // tap tiles.
    {2, 5, 9, 11, 5, 3, 3, 1, 1, 1, 1},
    {3, 7, 7, 7, 20, 3, 3, 1, 1, 1, 1},
    {1, 9, 8, 13, 33, 3, 3, 1, 1, 1, 1},
    {2, 4, 7, 7, 48, 3, 3, 1, 1, 1, 1},
    {5, 3, 6, 9, 70, 3, 3, 1, 1, 1, 1},
    {2, 11, 7, 7, 80, 1, 1, 1, 0, 1, 1},
    {1, 130, 5, 5, 9, 1, 1, 1, 0, 1, 1},
    // Batches the weight gradient stages in more than one chunk of images.
    {3, 1, 128, 128, 128, 1, 1, 1, 0, 1, 1},
    {5, 4, 36, 36, 64, 3, 3, 1, 1, 1, 2},
    // Strides (the panel kernel's stride phases), padding, dilation, groups, odd maps.
    {3, 6, 13, 11, 10, 3, 3, 2, 1, 1, 1},
    {2, 4, 15, 15, 8, 5, 3, 3, 2, 1, 1},
    {2, 6, 12, 10, 12, 3, 3, 1, 2, 2, 1},
    {2, 4, 17, 17, 6, 3, 3, 2, 2, 2, 1},
    {2, 5, 16, 14, 7, 3, 2, 2, 1, 1, 1},
    {4, 8, 9, 9, 8, 3, 3, 1, 1, 1, 2},
    {3, 8, 10, 10, 8, 3, 3, 1, 1, 1, 8},
    {5, 6, 7, 7, 9, 3, 3, 2, 1, 1, 3},
    {1, 2, 11, 11, 3, 7, 7, 1, 3, 1, 1},
    {2, 3, 12, 12, 4, 1, 1, 1, 0, 1, 1},
    {1, 17, 3, 3, 17, 3, 3, 1, 0, 1, 1},
    // Small maps the panel kernel stacks several to a block (4 and 3 images, the last block
    // short; 2 with groups).
    {11, 7, 8, 8, 24, 3, 3, 1, 1, 1, 1},
    {19, 5, 9, 9, 7, 3, 3, 1, 1, 1, 1},
    {8, 6, 12, 12, 10, 3, 3, 1, 1, 1, 2},
    // Winograd F(2x2, 3x3) (3x3 at unit stride, 8 to 64 channels and filters, more than 16
    // output tiles per channel or filter, 8 up to 16 channels and filters): odd outputs
    // (half-used last tiles), padding 0 (its input gradient pads 2) and 2, tile rows of 4 and 7
    // tiles (packed 4 and 2 to a vector on AVX-512) and wider than a vector, filters off its
    // register tile, work items that split images. The ResNet cases at 14x14 and 7x7 above have
    // too few tiles: the direct kernels.
    {13, 8, 10, 9, 12, 3, 3, 1, 0, 1, 1},
    {5, 12, 11, 13, 8, 3, 3, 1, 1, 1, 1},
    {9, 8, 6, 6, 8, 3, 3, 1, 2, 1, 1},
    {9, 8, 7, 7, 8, 3, 3, 1, 1, 1, 1},
    {5, 8, 14, 14, 10, 3, 3, 1, 1, 1, 1},
    {2, 10, 40, 38, 9, 3, 3, 1, 1, 1, 1},
    // Tile rows of two vectors (18 tiles) in work items of 7 tile rows that cross from one
    // image into the next: each image's run of rows reuses the input rows tile rows share.
    {3, 8, 36, 36, 8, 3, 3, 1, 1, 1, 1},
    {3, 40, 32, 32, 40, 3, 3, 1, 1, 1, 1},
    // ResNet-20's first stage at 4 images a call: work items of 7 tile rows of 14 tiles, 98
    // tiles, whose rows of V and M (128 floats, a power of two) are padded to 144.
    {4, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1},
    // Up to 16 channels and filters the bound is 8 tiles per channel: ResNet-20's first stage at
    // one image (196 tiles; on one thread one work item of all 14 tile rows) takes Winograd, the
    // same at 20x20 (100 tiles) does not.
    {1, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1},
    {1, 16, 20, 20, 16, 3, 3, 1, 1, 1, 1},
};

// The weight gradient's documented order (ConvWeightGrad.h): each weight one float FMA chain
// from zero over the pixels of the batch in order (image, output row, output column), the
// taps that fall on the zero border included (they add a zero product).
std::vector<float> weightGradientFmaChains(const Conv2dShape& s, const std::vector<float>& x,
                                           const std::vector<float>& dy) {
  const int64_t p = s.outH(), q = s.outW(), cg = s.c / s.groups, kg = s.k / s.groups;
  std::vector<float> gw(static_cast<size_t>(s.k * cg * s.r * s.s), 0.0f);
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t oh = 0; oh < p; ++oh) {
      for (int64_t ow = 0; ow < q; ++ow) {
        for (int64_t k = 0; k < s.k; ++k) {
          const int64_t g = k / kg;
          const float dv = dy[static_cast<size_t>(((n * s.k + k) * p + oh) * q + ow)];
          for (int64_t c = 0; c < cg; ++c) {
            for (int64_t r = 0; r < s.r; ++r) {
              for (int64_t t = 0; t < s.s; ++t) {
                const int64_t ih = oh * s.strideH - s.padH + r * s.dilationH;
                const int64_t iw = ow * s.strideW - s.padW + t * s.dilationW;
                const bool inside = ih >= 0 && ih < s.h && iw >= 0 && iw < s.w;
                const float xv = inside ? x[static_cast<size_t>(((n * s.c + g * cg + c) * s.h + ih) * s.w + iw)] : 0.0f;
                float& acc = gw[static_cast<size_t>(((k * cg + c) * s.r + r) * s.s + t)];
                acc = std::fma(xv, dv, acc);
              }
            }
          }
        }
      }
    }
  }
  return gw;
}

// Bit for bit, on one and two threads: 3-wide filter rows at unit stride (row tiles, one and
// two filter vectors, and the outer-product tiles beyond; without a border, where the first and
// last columns' products are not zero, and with a wider one), strides, 1x1, dilation, groups.
TEST(ConvReference, WeightGradientIsOneFmaChainPerWeightInPixelOrder) {
  const Case cases[] = {
      {3, 16, 12, 12, 16, 3, 3, 1, 1, 1, 1}, {2, 5, 9, 11, 32, 3, 3, 1, 1, 1, 1},  {2, 7, 8, 8, 20, 3, 3, 1, 1, 1, 1},
      {2, 6, 9, 9, 64, 3, 3, 1, 1, 1, 1},    {2, 6, 13, 11, 10, 3, 3, 2, 1, 1, 1}, {2, 9, 10, 10, 33, 1, 1, 1, 0, 1, 1},
      {2, 4, 12, 10, 12, 3, 3, 1, 2, 2, 1},  {3, 8, 9, 9, 8, 3, 3, 1, 1, 1, 2},    {2, 5, 2, 2, 7, 3, 3, 1, 1, 1, 1},
      {2, 6, 9, 11, 16, 3, 3, 1, 0, 1, 1},   {2, 3, 10, 12, 32, 3, 3, 1, 0, 1, 1}, {2, 4, 8, 9, 16, 3, 3, 1, 2, 1, 1},
  };
  const int saved = aps::numThreads();
  for (const int threads : {1, 2}) {
    aps::setNumThreads(threads);
    for (const Case& t : cases) {
      const Conv2dShape s = shapeOf(t);
      const std::vector<float> x = randomVector(static_cast<size_t>(s.n * s.c * s.h * s.w), 11);
      const std::vector<float> w = randomVector(static_cast<size_t>(s.k * s.c / s.groups * s.r * s.s), 12);
      const std::vector<float> dy = randomVector(static_cast<size_t>(s.n * s.k * s.outH() * s.outW()), 13);
      const std::vector<float> want = weightGradientFmaChains(s, x, dy);
      std::vector<float> gw(want.size(), NAN);
      aps::cpu::conv2dBackward(nullptr, gw.data(), nullptr, dy.data(), x.data(), w.data(), s);
      EXPECT_EQ(0, std::memcmp(gw.data(), want.data(), want.size() * sizeof(float)))
          << name(t) << " on " << threads << " threads";
    }
  }
  aps::setNumThreads(saved);
}

// Winograd takes the 3x3 unit-stride shapes with 8 to 64 channels and filters and enough tiles
// (more than 16 per channel or filter, 8 where there are at most 16), unless APS_WINOGRAD=0
// (ctest runs these tests both ways: test_ops_cpu_direct_conv); the cases include both sides of
// each bound, and at least 8 take it.
TEST(ConvReference, WinogradTakesItsShapesUnlessSwitchedOff) {
  const char* env = std::getenv("APS_WINOGRAD");
  const bool on = env == nullptr || std::string(env) != "0";
  EXPECT_EQ(aps::cpu::detail::winogradEnabled(), on);
  int winograd = 0;
  for (const Case& t : kCases) {
    const Conv2dShape s = shapeOf(t);
    const int64_t tiles = s.n * ((s.outH() + 1) / 2) * ((s.outW() + 1) / 2);
    const bool fits = t.r == 3 && t.s == 3 && t.stride == 1 && t.dilation == 1 && t.groups == 1 && t.pad <= 2 &&
                      t.c >= 8 && t.c <= 64 && t.k >= 8 && t.k <= 64 && s.outH() >= 2 && s.outW() >= 2 &&
                      tiles > (std::max(t.c, t.k) <= 16 ? 8 : 16) * std::max(t.c, t.k);
    EXPECT_EQ(aps::cpu::detail::winogradSupported(s), on && fits) << name(t);
    winograd += fits ? 1 : 0;
  }
  EXPECT_GE(winograd, 8);
}

TEST(ConvReference, EveryPathMatchesPlainLoops) {
  for (const Case& t : kCases) check(t);
}

// The panel kernel pads and computes an image per task when there are at least twice as many
// images as threads, or one thread (batches of 4 and 5 here on two threads, every batch on
// one), and pads the whole batch first otherwise.
TEST(ConvReference, EveryPathMatchesPlainLoopsOnTwoThreads) {
  const int saved = aps::numThreads();
  aps::setNumThreads(2);
  for (const Case& t : kCases) check(t);
  aps::setNumThreads(saved);
}

TEST(ConvReference, EveryPathMatchesPlainLoopsOnOneThread) {
  const int saved = aps::numThreads();
  aps::setNumThreads(1);
  for (const Case& t : kCases) check(t);
  aps::setNumThreads(saved);
}

}  // namespace
