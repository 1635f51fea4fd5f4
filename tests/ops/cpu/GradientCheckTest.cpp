// Finite-difference checks of every backward kernel: for a random upstream gradient g,
// L(x) = sum_i g_i * f(x)_i is accumulated in double and differentiated centrally.
#include "framework/ops/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace {

using Forward = std::function<std::vector<float>(const std::vector<float>&)>;

std::vector<float> randomVector(size_t size, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(size);
  for (float& x : v) x = normal(rng);
  return v;
}

double weightedSum(const std::vector<float>& y, const std::vector<float>& g) {
  double total = 0.0;
  for (size_t i = 0; i < y.size(); ++i) total += static_cast<double>(y[i]) * g[i];
  return total;
}

// Largest |numeric - analytic| relative to the analytic gradient's largest magnitude.
double gradientError(const Forward& forward, std::vector<float> x, const std::vector<float>& gradOut,
                     const std::vector<float>& analytic, float step) {
  double maxError = 0.0, maxMagnitude = 1e-3;
  for (size_t j = 0; j < x.size(); ++j) {
    const float saved = x[j];
    x[j] = saved + step;
    const double plus = weightedSum(forward(x), gradOut);
    x[j] = saved - step;
    const double minus = weightedSum(forward(x), gradOut);
    x[j] = saved;
    const double numeric = (plus - minus) / (2.0 * static_cast<double>(step));
    maxError = std::max(maxError, std::abs(numeric - analytic[j]));
    maxMagnitude = std::max(maxMagnitude, std::abs(static_cast<double>(analytic[j])));
  }
  return maxError / maxMagnitude;
}

constexpr double kTolerance = 5e-3;

TEST(GradientCheck, Conv2dStrideDilationGroups) {
  for (int variant = 0; variant < 3; ++variant) {
    aps::cpu::Conv2dShape s;
    s.n = 2, s.c = 4, s.h = 6, s.w = 5, s.k = 4, s.r = 3, s.s = 3, s.padH = 1, s.padW = 2;
    if (variant == 0) s.strideH = 2, s.strideW = 2;
    if (variant == 1) s.dilationH = 2, s.dilationW = 2, s.padH = 2;
    if (variant == 2) s.groups = 2;
    const size_t outSize = static_cast<size_t>(s.n * s.k * s.outH() * s.outW());
    std::vector<float> x = randomVector(static_cast<size_t>(s.n * s.c * s.h * s.w), 1);
    std::vector<float> w = randomVector(static_cast<size_t>(s.k * (s.c / s.groups) * s.r * s.s), 2);
    std::vector<float> b = randomVector(static_cast<size_t>(s.k), 3);
    const std::vector<float> g = randomVector(outSize, 4);
    std::vector<float> gx(x.size()), gw(w.size()), gb(b.size());
    aps::cpu::conv2dBackward(gx.data(), gw.data(), gb.data(), g.data(), x.data(), w.data(), s);
    auto run = [&](const std::vector<float>& xi, const std::vector<float>& wi, const std::vector<float>& bi) {
      std::vector<float> y(outSize);
      aps::cpu::conv2dForward(y.data(), xi.data(), wi.data(), bi.data(), s);
      return y;
    };
    EXPECT_LT(gradientError([&](const std::vector<float>& v) { return run(v, w, b); }, x, g, gx, 1e-2f), kTolerance)
        << "input, variant " << variant;
    EXPECT_LT(gradientError([&](const std::vector<float>& v) { return run(x, v, b); }, w, g, gw, 1e-2f), kTolerance)
        << "weight, variant " << variant;
    EXPECT_LT(gradientError([&](const std::vector<float>& v) { return run(x, w, v); }, b, g, gb, 1e-2f), kTolerance)
        << "bias, variant " << variant;
  }
}

TEST(GradientCheck, BatchNormTrain) {
  const aps::cpu::BatchNormShape s{3, 2, 5};
  const size_t size = static_cast<size_t>(s.n * s.c * s.hw);
  std::vector<float> x = randomVector(size, 5, 2.0f), gamma = randomVector(2, 6), beta = randomVector(2, 7);
  const std::vector<float> g = randomVector(size, 8);
  auto run = [&](const std::vector<float>& xi, const std::vector<float>& gi, const std::vector<float>& bi,
                 std::vector<float>* mean = nullptr, std::vector<float>* invStd = nullptr) {
    std::vector<float> y(size), m(2), v(2);
    aps::cpu::batchNormForwardTrain(y.data(), m.data(), v.data(), nullptr, nullptr, xi.data(), gi.data(), bi.data(), s,
                                    0.1f, 1e-5f);
    if (mean != nullptr) *mean = m, *invStd = v;
    return y;
  };
  std::vector<float> mean, invStd;
  run(x, gamma, beta, &mean, &invStd);
  std::vector<float> gx(size), gg(2), gb(2);
  aps::cpu::batchNormBackward(gx.data(), gg.data(), gb.data(), g.data(), x.data(), gamma.data(), mean.data(),
                              invStd.data(), s);
  EXPECT_LT(gradientError([&](const std::vector<float>& v) { return run(v, gamma, beta); }, x, g, gx, 1e-2f),
            kTolerance);
  EXPECT_LT(gradientError([&](const std::vector<float>& v) { return run(x, v, beta); }, gamma, g, gg, 1e-2f),
            kTolerance);
  EXPECT_LT(gradientError([&](const std::vector<float>& v) { return run(x, gamma, v); }, beta, g, gb, 1e-2f),
            kTolerance);
}

TEST(GradientCheck, Pools) {
  aps::cpu::Pool2dShape s;
  s.n = 2, s.c = 2, s.h = 7, s.w = 6, s.kernelH = 3, s.kernelW = 3, s.strideH = 2, s.strideW = 2, s.padH = 1,
  s.padW = 1;
  const size_t inSize = static_cast<size_t>(s.n * s.c * s.h * s.w);
  const size_t outSize = static_cast<size_t>(s.n * s.c * s.outH() * s.outW());
  // Distinct, well separated values keep every maximum away from a tie under the step.
  std::vector<float> x(inSize);
  for (size_t i = 0; i < inSize; ++i) x[i] = static_cast<float>((i * 37) % inSize) * 0.1f;
  const std::vector<float> g = randomVector(outSize, 9);
  std::vector<int64_t> argmax(outSize);
  std::vector<float> y(outSize), gx(inSize);
  aps::cpu::maxPool2dForward(y.data(), argmax.data(), x.data(), s);
  aps::cpu::maxPool2dBackward(gx.data(), g.data(), argmax.data(), s);
  auto maxPool = [&](const std::vector<float>& v) {
    std::vector<float> out(outSize);
    aps::cpu::maxPool2dForward(out.data(), nullptr, v.data(), s);
    return out;
  };
  EXPECT_LT(gradientError(maxPool, x, g, gx, 1e-2f), kTolerance);
  for (bool includePad : {true, false}) {
    aps::cpu::avgPool2dBackward(gx.data(), g.data(), s, includePad);
    auto avgPool = [&](const std::vector<float>& v) {
      std::vector<float> out(outSize);
      aps::cpu::avgPool2dForward(out.data(), v.data(), s, includePad);
      return out;
    };
    EXPECT_LT(gradientError(avgPool, x, g, gx, 1e-2f), kTolerance) << "count_include_pad " << includePad;
  }
}

TEST(GradientCheck, AdaptiveAvgPoolAndUpsample) {
  const int64_t n = 1, c = 2, h = 5, w = 7;
  const std::vector<float> x = randomVector(static_cast<size_t>(n * c * h * w), 10);
  for (const auto& size : {std::pair<int64_t, int64_t>{3, 4}, {9, 11}}) {
    const int64_t outH = size.first, outW = size.second;  // lambdas below capture them (clang 14)
    const size_t outSize = static_cast<size_t>(n * c * outH * outW);
    const std::vector<float> g = randomVector(outSize, 11);
    std::vector<float> gx(x.size());
    aps::cpu::adaptiveAvgPool2dBackward(gx.data(), g.data(), n, c, h, w, outH, outW);
    auto adaptive = [&](const std::vector<float>& v) {
      std::vector<float> out(outSize);
      aps::cpu::adaptiveAvgPool2dForward(out.data(), v.data(), n, c, h, w, outH, outW);
      return out;
    };
    EXPECT_LT(gradientError(adaptive, x, g, gx, 1e-2f), kTolerance) << "adaptive to " << outH << "x" << outW;
    aps::cpu::upsampleBilinearBackward(gx.data(), g.data(), n, c, h, w, outH, outW);
    auto bilinear = [&](const std::vector<float>& v) {
      std::vector<float> out(outSize);
      aps::cpu::upsampleBilinearForward(out.data(), v.data(), n, c, h, w, outH, outW);
      return out;
    };
    EXPECT_LT(gradientError(bilinear, x, g, gx, 1e-2f), kTolerance) << "bilinear to " << outH << "x" << outW;
  }
}

TEST(GradientCheck, CrossEntropyWithSmoothingAndIgnore) {
  const aps::cpu::CrossEntropyShape s{2, 4, 3};
  const std::vector<float> logits = randomVector(24, 12, 2.0f);
  const std::vector<int64_t> targets = {0, 255, 3, 2, 1, 255};
  const float gradLoss = 0.7f;
  std::vector<float> probs(24), grad(24);
  aps::cpu::crossEntropyForward(probs.data(), logits.data(), targets.data(), s, 0.1f, 255);
  aps::cpu::crossEntropyBackward(grad.data(), probs.data(), targets.data(), s, 0.1f, 255, gradLoss);
  auto loss = [&](const std::vector<float>& v) {
    std::vector<float> p(24);
    return std::vector<float>{aps::cpu::crossEntropyForward(p.data(), v.data(), targets.data(), s, 0.1f, 255)};
  };
  EXPECT_LT(gradientError(loss, logits, {gradLoss}, grad, 1e-2f), kTolerance);
}

}  // namespace
