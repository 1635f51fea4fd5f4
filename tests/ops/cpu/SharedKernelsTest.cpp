// The CUDA kernels (framework/ops/cuda) compute some results differently from the CPU
// kernels, with the same shared functions: backward passes gather per input element where
// the CPU scatters per output, and batch norm's sums give each lane its own thread. These
// tests run those formulations on the CPU and expect the CPU kernels' bits, so the order the
// device follows is proven here, on any machine.
#include "framework/ops/cpu/Kernels.h"
#include "framework/ops/kernels/BatchNorm.h"
#include "framework/ops/kernels/CrossEntropy.h"
#include "framework/ops/kernels/Pooling.h"
#include "framework/ops/kernels/Reduce.h"
#include "framework/ops/kernels/Upsample.h"
#include "tests/common/RandomVector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

namespace k = aps::kernels;

using aps::testsupport::randomVector;

void expectSameBits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(aps::bitCast<uint32_t>(a[i]), aps::bitCast<uint32_t>(b[i]))
        << what << " at " << i << ": " << a[i] << " vs " << b[i];
  }
}

// Every output whose window holds input i, by brute force.
k::Window bruteCovering(int64_t i, int64_t out, const std::function<k::Window(int64_t)>& window) {
  int64_t begin = out, end = 0;
  for (int64_t o = 0; o < out; ++o) {
    const k::Window w = window(o);
    if (w.begin <= i && i < w.end) {
      begin = std::min(begin, o);
      end = o + 1;
    }
  }
  return begin < end ? k::Window{begin, end} : k::Window{0, 0};
}

// The build fuses no a * b + c on its own (-ffp-contract=off, cmake/ApsOptions.cmake), so the
// CPU fuses exactly the steps the shared kernels write out with fmaf32, as the GPU does
// (--fmad=false). With a = b = 1 + 2^-12 and c = -(1 + 2^-11), a * b rounds to -c and the
// plain expression gives 0; one fused step keeps the 2^-24. Scalar and in a loop the
// compiler vectorises; and batch norm's affine map is the one written fused step.
TEST(SharedKernels, NoMultiplyAddIsFusedButTheWrittenOnes) {
  volatile float va = 1.0f + 0x1p-12f, vc = -(1.0f + 0x1p-11f);
  const float a = va, c = vc;
  EXPECT_EQ(a * a + c, 0.0f);
  EXPECT_EQ(k::fmaf32(a, a, c), 0x1p-24f);
  std::vector<float> x(64, a), z(64, c), out(64, 1.0f);
  for (size_t i = 0; i < out.size(); ++i) out[i] = x[i] * x[i] + z[i];
  EXPECT_EQ(std::count(out.begin(), out.end(), 0.0f), 64);
  const k::BatchNormAffine affine{a, c};
  EXPECT_EQ(k::batchNormApply(a, affine), 0x1p-24f);
}

TEST(SharedKernels, CoveringRangesMatchBruteForce) {
  for (int64_t size : {1, 2, 5, 7, 16}) {
    for (int64_t kernel = 1; kernel <= 4; ++kernel) {
      for (int64_t stride = 1; stride <= 3; ++stride) {
        for (int64_t pad = 0; 2 * pad <= kernel; ++pad) {
          const int64_t out = (size + 2 * pad - kernel) / stride + 1;
          if (out < 1) continue;
          for (int64_t i = 0; i < size; ++i) {
            const k::Window got = k::poolCovering(i, stride, pad, kernel, out);
            const k::Window want =
                bruteCovering(i, out, [&](int64_t o) { return k::poolWindow(o, stride, pad, kernel, size); });
            // An empty range may be reported with any bounds.
            if (want.begin == want.end) {
              EXPECT_GE(got.begin, got.end);
            } else {
              EXPECT_EQ(got.begin, want.begin) << size << " " << kernel << " " << stride << " " << pad << " " << i;
              EXPECT_EQ(got.end, want.end) << size << " " << kernel << " " << stride << " " << pad << " " << i;
            }
          }
        }
      }
    }
  }
  for (int64_t size : {1, 3, 5, 7, 10, 13}) {
    for (int64_t out : {1, 2, 3, 4, 6, 7, 13, 20}) {
      for (int64_t i = 0; i < size; ++i) {
        const k::Window got = k::adaptiveCovering(i, size, out);
        const k::Window want = bruteCovering(i, out, [&](int64_t o) { return k::adaptiveBin(o, size, out); });
        EXPECT_EQ(got.begin, want.begin) << size << " " << out << " " << i;
        EXPECT_EQ(got.end, want.end) << size << " " << out << " " << i;
      }
      // The bilinear range may be wider than needed but must hold every output with a tap on i.
      for (int64_t i = 0; i < size; ++i) {
        const k::Window range = k::bilinearCovering(i, size, out);
        for (int64_t o = 0; o < out; ++o) {
          const k::Tap t = k::bilinearTap(o, size, out);
          if (t.i0 == i || t.i1 == i) {
            EXPECT_TRUE(range.begin <= o && o < range.end) << size << " " << out << " " << i << " " << o;
          }
        }
      }
    }
  }
}

// Pool shapes with overlapping, touching and gapped windows, with and without padding.
std::vector<aps::cpu::Pool2dShape> poolShapes() {
  std::vector<aps::cpu::Pool2dShape> shapes;
  for (int64_t kernel : {1, 2, 3}) {
    for (int64_t stride : {1, 2, 3}) {
      for (int64_t pad = 0; 2 * pad <= kernel; ++pad) {
        aps::cpu::Pool2dShape s;
        s.n = 2, s.c = 3, s.h = 9, s.w = 7;
        s.kernelH = kernel, s.kernelW = kernel == 1 ? 2 : kernel;
        s.strideH = stride, s.strideW = stride == 3 ? 1 : stride + 1;
        s.padH = pad, s.padW = 2 * pad <= s.kernelW ? pad : 0;
        shapes.push_back(s);
      }
    }
  }
  return shapes;
}

TEST(SharedKernels, PoolingGatherMatchesTheScatterKernels) {
  for (const aps::cpu::Pool2dShape& s : poolShapes()) {
    const int64_t p = s.outH(), q = s.outW(), planes = s.n * s.c;
    const std::vector<float> x = randomVector(static_cast<size_t>(planes * s.h * s.w), 1);
    const std::vector<float> g = randomVector(static_cast<size_t>(planes * p * q), 2);
    std::vector<float> out(g.size());
    std::vector<int64_t> argmax(g.size());
    aps::cpu::maxPool2dForward(out.data(), argmax.data(), x.data(), s);
    std::vector<float> scatter(x.size()), gather(x.size());
    aps::cpu::maxPool2dBackward(scatter.data(), g.data(), argmax.data(), s);
    for (int64_t i = 0; i < planes * s.h * s.w; ++i) {
      const int64_t plane = i / (s.h * s.w), ih = (i / s.w) % s.h, iw = i % s.w;
      gather[static_cast<size_t>(i)] =
          k::maxPoolGradAt(g.data() + plane * p * q, argmax.data() + plane * p * q, ih, iw, s.w, p, q, s.kernelH,
                           s.kernelW, s.strideH, s.strideW, s.padH, s.padW);
    }
    expectSameBits(gather, scatter, "max pool backward");
    for (bool includePad : {false, true}) {
      aps::cpu::avgPool2dBackward(scatter.data(), g.data(), s, includePad);
      for (int64_t i = 0; i < planes * s.h * s.w; ++i) {
        const int64_t plane = i / (s.h * s.w), ih = (i / s.w) % s.h, iw = i % s.w;
        gather[static_cast<size_t>(i)] = k::avgPoolGradAt(g.data() + plane * p * q, ih, iw, s.h, s.w, p, q, s.kernelH,
                                                          s.kernelW, s.strideH, s.strideW, s.padH, s.padW, includePad);
      }
      expectSameBits(gather, scatter, "avg pool backward");
    }
  }
}

// Max pooling forward against the shared window scan (kernels::windowMax), value bits and
// index, on rows wide enough for the CPU's 16-output vector path (stride 1 and 2, with and
// without padding, a row of 16 outputs exactly, rows with a scalar tail), with ties (values on
// a coarse grid), -infinity everywhere in some windows, and NaNs (the first in scan order wins).
TEST(SharedKernels, MaxPoolForwardMatchesTheWindowScan) {
  struct PoolCase {
    int64_t h, w, kernel, stride, pad;
  };
  const PoolCase cases[] = {{7, 112, 3, 2, 1}, {5, 40, 3, 1, 1}, {6, 33, 2, 2, 0}, {4, 18, 3, 1, 0},
                            {5, 67, 3, 2, 0},  {3, 50, 1, 1, 0}, {6, 80, 3, 2, 1}};
  const float inf = std::numeric_limits<float>::infinity();
  for (const PoolCase& t : cases) {
    aps::cpu::Pool2dShape s;
    s.n = 2, s.c = 2, s.h = t.h, s.w = t.w;
    s.kernelH = s.kernelW = t.kernel;
    s.strideH = s.strideW = t.stride;
    s.padH = s.padW = t.pad;
    const int64_t p = s.outH(), q = s.outW(), planes = s.n * s.c;
    std::vector<float> x = randomVector(static_cast<size_t>(planes * s.h * s.w), 7);
    std::mt19937 rng(11);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = std::round(x[i] * 2.0f);  // ties
      const unsigned r = rng() % 64;
      if (r == 0) x[i] = std::numeric_limits<float>::quiet_NaN();
      if (r == 1) x[i] = -std::numeric_limits<float>::quiet_NaN();
      if (r < 6 && r > 1) x[i] = -inf;
    }
    // A window of -infinity only: the first element's index.
    std::fill(x.begin(), x.begin() + 3 * s.w, -inf);
    std::vector<float> out(static_cast<size_t>(planes * p * q));
    std::vector<int64_t> argmax(out.size());
    aps::cpu::maxPool2dForward(out.data(), argmax.data(), x.data(), s);
    std::vector<float> want(out.size());
    std::vector<int64_t> wantIndex(out.size());
    for (int64_t plane = 0; plane < planes; ++plane) {
      for (int64_t oh = 0; oh < p; ++oh) {
        for (int64_t ow = 0; ow < q; ++ow) {
          const size_t o = static_cast<size_t>((plane * p + oh) * q + ow);
          want[o] =
              k::windowMax(x.data() + plane * s.h * s.w, s.w, k::poolWindow(oh, s.strideH, s.padH, s.kernelH, s.h),
                           k::poolWindow(ow, s.strideW, s.padW, s.kernelW, s.w), &wantIndex[o]);
        }
      }
    }
    const std::string what = "max pool " + std::to_string(t.w) + " wide, kernel " + std::to_string(t.kernel) +
                             " stride " + std::to_string(t.stride) + " pad " + std::to_string(t.pad);
    expectSameBits(want, out, what);
    EXPECT_EQ(wantIndex, argmax) << what;
    // Without indices (inference), the same values.
    std::vector<float> noIndex(out.size());
    aps::cpu::maxPool2dForward(noIndex.data(), nullptr, x.data(), s);
    expectSameBits(want, noIndex, what + " without indices");
  }
}

TEST(SharedKernels, AdaptivePoolAndUpsampleGatherMatchTheScatterKernels) {
  const int64_t n = 2, c = 2;
  for (int64_t h : {1, 3, 7, 12}) {
    for (int64_t outH : {1, 2, 5, 7, 16, 25}) {
      const int64_t w = h + 1, outW = outH + 2;
      const std::vector<float> g = randomVector(static_cast<size_t>(n * c * outH * outW), 3);
      std::vector<float> scatter(static_cast<size_t>(n * c * h * w)), gather(scatter.size());
      aps::cpu::adaptiveAvgPool2dBackward(scatter.data(), g.data(), n, c, h, w, outH, outW);
      for (int64_t i = 0; i < n * c * h * w; ++i) {
        const int64_t plane = i / (h * w), ih = (i / w) % h, iw = i % w;
        gather[static_cast<size_t>(i)] =
            k::adaptiveAvgPoolGradAt(g.data() + plane * outH * outW, ih, iw, h, w, outH, outW);
      }
      expectSameBits(gather, scatter, "adaptive avg pool backward");
      aps::cpu::upsampleBilinearBackward(scatter.data(), g.data(), n, c, h, w, outH, outW);
      for (int64_t i = 0; i < n * c * h * w; ++i) {
        const int64_t plane = i / (h * w), ih = (i / w) % h, iw = i % w;
        gather[static_cast<size_t>(i)] = k::upsampleGradAt(g.data() + plane * outH * outW, ih, iw, h, w, outH, outW);
      }
      expectSameBits(gather, scatter, "upsample backward " + std::to_string(h) + " -> " + std::to_string(outH));
    }
  }
}

// The device's lane steps (kernels/Reduce.h): one fused multiply-add each.
float fusedSquaredDeviation(float acc, float x, float mean) {
  const float d = x - mean;
  return std::fma(d, d, acc);
}

// Batch norm's statistics as a CUDA block computes them: kLanes threads per plane, each
// adding every kLanes-th value, lanes combined by combineLanes, planes added in order in
// double. The lane steps are fused multiply-adds, as on the device and in the CPU's
// vectorised loop. The normalised output is batchNormApply of each value.
TEST(SharedKernels, BatchNormLaneOrderMatchesTheCpuStatistics) {
  // 3000 values a plane: the 12 planes are split over the threads (chunks of 5 planes).
  for (int64_t hw : {1, 5, 16, 17, 49, 1024, 3000}) {
    aps::cpu::BatchNormShape s{3, 4, hw};
    const std::vector<float> x = randomVector(static_cast<size_t>(s.n * s.c * s.hw), 4);
    std::vector<float> out(x.size()), mean(4), invStd(4);
    aps::cpu::batchNormForwardTrain(out.data(), mean.data(), invStd.data(), nullptr, nullptr, x.data(), nullptr,
                                    nullptr, s, 0.1f, 1e-5f);
    for (int64_t c = 0; c < s.c; ++c) {
      auto channelSum = [&](auto step) {
        double total = 0.0;
        for (int64_t n = 0; n < s.n; ++n) {
          float lanes[k::kLanes] = {};
          for (int lane = 0; lane < k::kLanes; ++lane) {
            for (int64_t i = lane; i < s.hw; i += k::kLanes) {
              lanes[lane] = step(lanes[lane], x[static_cast<size_t>((n * s.c + c) * s.hw + i)]);
            }
          }
          k::combineLanes(lanes);
          total += static_cast<double>(lanes[0]);
        }
        return total;
      };
      const float m = k::batchNormMean(channelSum([](float acc, float v) { return acc + v; }), s.n * s.hw);
      const float is = k::batchNormInvStd(
          channelSum([m](float acc, float v) { return fusedSquaredDeviation(acc, v, m); }), s.n * s.hw, 1e-5f);
      EXPECT_EQ(aps::bitCast<uint32_t>(m), aps::bitCast<uint32_t>(mean[static_cast<size_t>(c)])) << hw << " " << c;
      EXPECT_EQ(aps::bitCast<uint32_t>(is), aps::bitCast<uint32_t>(invStd[static_cast<size_t>(c)])) << hw << " " << c;
      const k::BatchNormAffine a = k::batchNormAffine(nullptr, nullptr, c, m, is);
      for (int64_t n = 0; n < s.n; ++n) {
        for (int64_t i = 0; i < s.hw; ++i) {
          const size_t at = static_cast<size_t>((n * s.c + c) * s.hw + i);
          ASSERT_EQ(aps::bitCast<uint32_t>(k::batchNormApply(x[at], a)), aps::bitCast<uint32_t>(out[at]))
              << hw << " output at " << at;
        }
      }
    }
    // Backward: sum dy and sum dy * (x - mean) in the same lanes, then per value the shared
    // batchNormGradIn, as a CUDA thread computes it (the AVX-512 kernel writes its one
    // negated fused multiply-add in registers). Under a fused ReLU, dy is the output
    // gradient where the forward's mask (out > 0) is set, and also the residual's gradient.
    const std::vector<float> g = randomVector(x.size(), 5), y = randomVector(x.size(), 6);
    const std::vector<float> gamma = randomVector(4, 7);
    std::vector<uint16_t> mask(static_cast<size_t>(s.n * s.c * aps::cpu::reluMaskWords(s.hw)));
    aps::cpu::reluMask(mask.data(), y.data(), s);
    for (bool fused : {false, true}) {
      const std::string what = std::to_string(hw) + (fused ? " fused" : "");
      std::vector<float> gradGamma(4), gradBeta(4), gradIn(x.size()), gradResidual(x.size());
      aps::cpu::batchNormBackward(gradIn.data(), gradGamma.data(), gradBeta.data(), g.data(), x.data(), gamma.data(),
                                  mean.data(), invStd.data(), s,
                                  {fused ? mask.data() : nullptr, fused ? gradResidual.data() : nullptr});
      std::vector<float> dy(g);
      if (fused) {
        for (size_t i = 0; i < dy.size(); ++i) dy[i] = y[i] > 0.0f ? g[i] : 0.0f;
        expectSameBits(dy, gradResidual, "residual gradient " + what);
      }
      for (int64_t c = 0; c < s.c; ++c) {
        const float m = mean[static_cast<size_t>(c)];
        double sumG = 0.0, sumGX = 0.0;
        for (int64_t n = 0; n < s.n; ++n) {
          float lanesG[k::kLanes] = {}, lanesGX[k::kLanes] = {};
          for (int lane = 0; lane < k::kLanes; ++lane) {
            for (int64_t i = lane; i < s.hw; i += k::kLanes) {
              const size_t at = static_cast<size_t>((n * s.c + c) * s.hw + i);
              lanesG[lane] += dy[at];
              lanesGX[lane] = std::fma(dy[at], x[at] - m, lanesGX[lane]);
            }
          }
          k::combineLanes(lanesG);
          k::combineLanes(lanesGX);
          sumG += static_cast<double>(lanesG[0]);
          sumGX += static_cast<double>(lanesGX[0]);
        }
        const float is = invStd[static_cast<size_t>(c)];
        EXPECT_EQ(aps::bitCast<uint32_t>(k::batchNormGradBeta(sumG)),
                  aps::bitCast<uint32_t>(gradBeta[static_cast<size_t>(c)]))
            << what << " " << c;
        EXPECT_EQ(aps::bitCast<uint32_t>(k::batchNormGradGamma(sumGX, is)),
                  aps::bitCast<uint32_t>(gradGamma[static_cast<size_t>(c)]))
            << what << " " << c;
        const k::BatchNormGrad kc = k::batchNormGrad(sumG, sumGX, s.n * s.hw, gamma.data(), c, m, is);
        for (int64_t n = 0; n < s.n; ++n) {
          for (int64_t i = 0; i < s.hw; ++i) {
            const size_t at = static_cast<size_t>((n * s.c + c) * s.hw + i);
            const float want = k::batchNormGradIn(dy[at], x[at], kc);
            ASSERT_EQ(aps::bitCast<uint32_t>(want), aps::bitCast<uint32_t>(gradIn[at])) << what << " at " << at;
          }
        }
      }
    }
  }
}

// Cross-entropy one position at a time, classes in order, as a CUDA thread computes it: the
// probabilities are the CPU kernel's bits (on the host both call std::exp), the loss agrees
// up to the order of the double sum.
TEST(SharedKernels, CrossEntropyPerPositionMatchesTheCpuKernel) {
  aps::cpu::CrossEntropyShape s{3, 5, 300};
  const std::vector<float> logits = randomVector(static_cast<size_t>(s.n * s.c * s.spatial), 5);
  std::vector<int64_t> targets(static_cast<size_t>(s.n * s.spatial));
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = i % 7 == 3 ? -100 : static_cast<int64_t>(i % 5);
  const float smoothing = 0.1f;
  std::vector<float> probs(logits.size()), mine(logits.size());
  const float loss = aps::cpu::crossEntropyForward(probs.data(), logits.data(), targets.data(), s, smoothing, -100);
  double total = 0.0;
  int64_t counted = 0;
  for (int64_t pos = 0; pos < s.n * s.spatial; ++pos) {
    const int64_t n = pos / s.spatial, i = pos % s.spatial;
    const float* x = logits.data() + n * s.c * s.spatial + i;
    float* p = mine.data() + n * s.c * s.spatial + i;
    float maxLogit = -std::numeric_limits<float>::infinity(), sumLogit = 0.0f, sumExp = 0.0f;
    for (int64_t c = 0; c < s.c; ++c) k::logitStats(x[c * s.spatial], maxLogit, sumLogit);
    for (int64_t c = 0; c < s.c; ++c) {
      p[c * s.spatial] = k::softmaxNumerator(x[c * s.spatial], maxLogit);
      sumExp += p[c * s.spatial];
    }
    const float inv = 1.0f / sumExp;
    for (int64_t c = 0; c < s.c; ++c) p[c * s.spatial] *= inv;
    const int64_t t = targets[static_cast<size_t>(pos)];
    if (t == -100) continue;
    total += k::crossEntropyAt(maxLogit, inv, x[t * s.spatial], sumLogit, 1.0f / static_cast<float>(s.c), smoothing);
    ++counted;
  }
  expectSameBits(mine, probs, "softmax probabilities");
  EXPECT_NEAR(static_cast<float>(total / static_cast<double>(counted)), loss, 1e-6f * std::abs(loss));
}

}  // namespace
