// Each CPU kernel against PyTorch 1.13 (fixtures from tools/fixtures/make_kernel_fixtures.py).
#include "framework/core/Error.h"
#include "framework/ops/cpu/Kernels.h"
#include "tests/ops/cpu/Fixture.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace {

using aps::test::Fixture;
using aps::test::maxRelativeError;

constexpr double kTolerance = 1e-4;

#define EXPECT_MATCHES(actual, fixture, key) \
  EXPECT_LT(maxRelativeError((actual).data(), (fixture).floats(key)), kTolerance) << (key)

class ConvFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ConvFixture, MatchesPyTorch) {
  const Fixture f(GetParam());
  const std::vector<int64_t>& cfg = f.ints("config");
  aps::cpu::Conv2dShape s;
  s.n = cfg[0], s.c = cfg[1], s.h = cfg[2], s.w = cfg[3], s.k = cfg[4], s.r = cfg[5], s.s = cfg[6];
  s.strideH = cfg[7], s.strideW = cfg[8], s.padH = cfg[9], s.padW = cfg[10], s.dilationH = cfg[11];
  s.dilationW = cfg[12], s.groups = cfg[13];
  const bool hasBias = cfg[14] != 0;
  const float* bias = hasBias ? f.floats("bias").data() : nullptr;
  std::vector<float> out(f.floats("out").size(), -1.0f);
  aps::cpu::conv2dForward(out.data(), f.floats("in").data(), f.floats("weight").data(), bias, s);
  EXPECT_MATCHES(out, f, "out");
  // Backward overwrites its outputs: start them dirty.
  std::vector<float> gradIn(f.floats("in").size(), 7.0f), gradWeight(f.floats("weight").size(), 7.0f),
      gradBias(static_cast<size_t>(s.k), 7.0f);
  aps::cpu::conv2dBackward(gradIn.data(), gradWeight.data(), hasBias ? gradBias.data() : nullptr,
                           f.floats("grad_out").data(), f.floats("in").data(), f.floats("weight").data(), s);
  EXPECT_MATCHES(gradIn, f, "grad_in");
  EXPECT_MATCHES(gradWeight, f, "grad_weight");
  if (hasBias) {
    EXPECT_MATCHES(gradBias, f, "grad_bias");
  }
  // Each output may be requested alone.
  std::vector<float> onlyWeight(gradWeight.size(), 7.0f);
  aps::cpu::conv2dBackward(nullptr, onlyWeight.data(), nullptr, f.floats("grad_out").data(), f.floats("in").data(),
                           f.floats("weight").data(), s);
  EXPECT_EQ(onlyWeight, gradWeight);
  std::vector<float> onlyIn(gradIn.size(), 7.0f);
  aps::cpu::conv2dBackward(onlyIn.data(), nullptr, nullptr, f.floats("grad_out").data(), f.floats("in").data(),
                           f.floats("weight").data(), s);
  EXPECT_EQ(onlyIn, gradIn);
}

INSTANTIATE_TEST_SUITE_P(Kernels, ConvFixture,
                         ::testing::Values("conv_basic", "conv_stride2", "conv_dilation2", "conv_groups2",
                                           "conv_pointwise", "conv_pointwise_stride2", "conv_rectangular",
                                           "conv_chunked_batch", "conv_chunked_odd", "conv_direct_wide",
                                           "conv_direct_dilation_groups"));

TEST(ConvKernel, RejectsGroupsThatDoNotDivideChannels) {
  aps::cpu::Conv2dShape s;
  s.c = 3, s.k = 4, s.groups = 2;
  std::vector<float> buffer(64);
  EXPECT_THROW(aps::cpu::conv2dForward(buffer.data(), buffer.data(), buffer.data(), nullptr, s), aps::Error);
}

class BatchNormFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchNormFixture, MatchesPyTorch) {
  const Fixture f(GetParam());
  const std::vector<int64_t>& cfg = f.ints("config");
  const aps::cpu::BatchNormShape s{cfg[0], cfg[1], cfg[2]};
  const float momentum = f.floats("scalars")[0], eps = f.floats("scalars")[1];
  std::vector<float> out(f.floats("out").size()), mean(static_cast<size_t>(s.c)), invStd(mean.size());
  std::vector<float> runningMean = f.floats("running_mean_in"), runningVar = f.floats("running_var_in");
  aps::cpu::batchNormForwardTrain(out.data(), mean.data(), invStd.data(), runningMean.data(), runningVar.data(),
                                  f.floats("in").data(), f.floats("gamma").data(), f.floats("beta").data(), s, momentum,
                                  eps);
  EXPECT_MATCHES(out, f, "out");
  EXPECT_MATCHES(mean, f, "save_mean");
  EXPECT_MATCHES(invStd, f, "save_invstd");
  EXPECT_MATCHES(runningMean, f, "running_mean_out");
  EXPECT_MATCHES(runningVar, f, "running_var_out");

  std::vector<float> gradIn(out.size(), 7.0f), gradGamma(mean.size(), 7.0f), gradBeta(mean.size(), 7.0f);
  aps::cpu::batchNormBackward(gradIn.data(), gradGamma.data(), gradBeta.data(), f.floats("grad_out").data(),
                              f.floats("in").data(), f.floats("gamma").data(), mean.data(), invStd.data(), s);
  EXPECT_MATCHES(gradIn, f, "grad_in");
  EXPECT_MATCHES(gradGamma, f, "grad_gamma");
  EXPECT_MATCHES(gradBeta, f, "grad_beta");

  std::vector<float> evalOut(out.size());
  aps::cpu::batchNormForwardEval(evalOut.data(), f.floats("in").data(), f.floats("gamma").data(),
                                 f.floats("beta").data(), f.floats("running_mean_in").data(),
                                 f.floats("running_var_in").data(), s, eps);
  EXPECT_MATCHES(evalOut, f, "eval_out");
}

INSTANTIATE_TEST_SUITE_P(Kernels, BatchNormFixture, ::testing::Values("batch_norm", "batch_norm_single_pixel"));

aps::cpu::Pool2dShape poolShape(const Fixture& f) {
  const std::vector<int64_t>& cfg = f.ints("config");
  aps::cpu::Pool2dShape s;
  s.n = cfg[0], s.c = cfg[1], s.h = cfg[2], s.w = cfg[3], s.kernelH = cfg[4], s.kernelW = cfg[5];
  s.strideH = cfg[6], s.strideW = cfg[7], s.padH = cfg[8], s.padW = cfg[9];
  return s;
}

class MaxPoolFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(MaxPoolFixture, MatchesPyTorch) {
  const Fixture f(GetParam());
  const aps::cpu::Pool2dShape s = poolShape(f);
  std::vector<float> out(f.floats("out").size());
  std::vector<int64_t> argmax(out.size());
  aps::cpu::maxPool2dForward(out.data(), argmax.data(), f.floats("in").data(), s);
  EXPECT_MATCHES(out, f, "out");
  EXPECT_EQ(argmax, f.ints("argmax"));
  std::vector<float> gradIn(f.floats("in").size(), 7.0f);
  aps::cpu::maxPool2dBackward(gradIn.data(), f.floats("grad_out").data(), argmax.data(), s);
  EXPECT_MATCHES(gradIn, f, "grad_in");
}

TEST(MaxPoolKernel, NaNWinsItsWindowAsInPyTorch) {
  aps::cpu::Pool2dShape s;
  s.h = 2, s.w = 2, s.kernelH = 2, s.kernelW = 2, s.strideH = 2, s.strideW = 2;
  const std::vector<float> in = {1.0f, std::nanf(""), 5.0f, 2.0f};
  float out = 0.0f;
  int64_t argmax = -1;
  aps::cpu::maxPool2dForward(&out, &argmax, in.data(), s);
  EXPECT_TRUE(std::isnan(out));
  EXPECT_EQ(argmax, 1);
  // The first NaN in scan order, after a larger value and before another NaN: row-major
  // windows [9 3; NaN(-) NaN(+)] and [-inf -inf; -inf -inf] (the first element).
  s.w = 4;
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> two = {9.0f, 3.0f, -inf, -inf, -std::nanf(""), std::nanf(""), -inf, -inf};
  float outs[2] = {0.0f, 0.0f};
  int64_t argmaxes[2] = {-1, -1};
  aps::cpu::maxPool2dForward(outs, argmaxes, two.data(), s);
  EXPECT_TRUE(std::isnan(outs[0]) && std::signbit(outs[0]));
  EXPECT_EQ(argmaxes[0], 4);
  EXPECT_EQ(outs[1], -inf);
  EXPECT_EQ(argmaxes[1], 2);
}

INSTANTIATE_TEST_SUITE_P(Kernels, MaxPoolFixture, ::testing::Values("max_pool_k3s2p1", "max_pool_k2s2"));

class AvgPoolFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(AvgPoolFixture, MatchesPyTorch) {
  const Fixture f(GetParam());
  const aps::cpu::Pool2dShape s = poolShape(f);
  const bool countIncludePad = f.ints("config")[10] != 0;
  std::vector<float> out(f.floats("out").size());
  aps::cpu::avgPool2dForward(out.data(), f.floats("in").data(), s, countIncludePad);
  EXPECT_MATCHES(out, f, "out");
  std::vector<float> gradIn(f.floats("in").size(), 7.0f);
  aps::cpu::avgPool2dBackward(gradIn.data(), f.floats("grad_out").data(), s, countIncludePad);
  EXPECT_MATCHES(gradIn, f, "grad_in");
}

INSTANTIATE_TEST_SUITE_P(Kernels, AvgPoolFixture,
                         ::testing::Values("avg_pool_k3s2p1_include", "avg_pool_k3s2p1_exclude", "avg_pool_k2s2_odd"));

class AdaptiveAvgPoolFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(AdaptiveAvgPoolFixture, MatchesPyTorch) {
  const Fixture f(GetParam());
  const std::vector<int64_t>& c = f.ints("config");
  std::vector<float> out(f.floats("out").size());
  aps::cpu::adaptiveAvgPool2dForward(out.data(), f.floats("in").data(), c[0], c[1], c[2], c[3], c[4], c[5]);
  EXPECT_MATCHES(out, f, "out");
  std::vector<float> gradIn(f.floats("in").size(), 7.0f);
  aps::cpu::adaptiveAvgPool2dBackward(gradIn.data(), f.floats("grad_out").data(), c[0], c[1], c[2], c[3], c[4], c[5]);
  EXPECT_MATCHES(gradIn, f, "grad_in");
}

INSTANTIATE_TEST_SUITE_P(Kernels, AdaptiveAvgPoolFixture,
                         ::testing::Values("adaptive_avg_7x9_to_3x4", "adaptive_avg_5x5_to_1x1",
                                           "adaptive_avg_4x4_to_6x5"));

class UpsampleFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(UpsampleFixture, MatchesPyTorch) {
  const Fixture f(GetParam());
  const std::vector<int64_t>& c = f.ints("config");
  std::vector<float> out(f.floats("out").size());
  aps::cpu::upsampleBilinearForward(out.data(), f.floats("in").data(), c[0], c[1], c[2], c[3], c[4], c[5]);
  EXPECT_MATCHES(out, f, "out");
  std::vector<float> gradIn(f.floats("in").size(), 7.0f);
  aps::cpu::upsampleBilinearBackward(gradIn.data(), f.floats("grad_out").data(), c[0], c[1], c[2], c[3], c[4], c[5]);
  EXPECT_MATCHES(gradIn, f, "grad_in");
}

INSTANTIATE_TEST_SUITE_P(Kernels, UpsampleFixture,
                         ::testing::Values("upsample_5x7_to_11x13", "upsample_8x8_to_16x16", "upsample_6x9_to_4x5",
                                           "upsample_1x1_to_3x3"));

class CrossEntropyFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(CrossEntropyFixture, MatchesPyTorch) {
  const Fixture f(GetParam());
  const std::vector<int64_t>& c = f.ints("config");
  const aps::cpu::CrossEntropyShape s{c[0], c[1], c[2]};
  const int64_t ignoreIndex = c[3];
  const float smoothing = f.floats("scalars")[0], gradLoss = f.floats("scalars")[1];
  std::vector<float> probs(f.floats("probs").size());
  const float loss = aps::cpu::crossEntropyForward(probs.data(), f.floats("logits").data(), f.ints("targets").data(), s,
                                                   smoothing, ignoreIndex);
  EXPECT_NEAR(loss, f.floats("loss")[0], 1e-4 * std::max(1.0f, std::abs(f.floats("loss")[0])));
  EXPECT_MATCHES(probs, f, "probs");
  std::vector<float> grad(probs.size(), 7.0f);
  aps::cpu::crossEntropyBackward(grad.data(), probs.data(), f.ints("targets").data(), s, smoothing, ignoreIndex,
                                 gradLoss);
  EXPECT_MATCHES(grad, f, "grad_logits");
}

INSTANTIATE_TEST_SUITE_P(Kernels, CrossEntropyFixture,
                         ::testing::Values("cross_entropy_plain", "cross_entropy_smoothing", "cross_entropy_pixels"));

TEST(CrossEntropyKernel, RejectsTargetOutsideClassesNamingIt) {
  const aps::cpu::CrossEntropyShape s{2, 3, 1};
  const std::vector<float> logits(6, 0.0f);
  std::vector<float> probs(6);
  const std::vector<int64_t> targets = {1, 3};
  try {
    aps::cpu::crossEntropyForward(probs.data(), logits.data(), targets.data(), s, 0.0f, -100);
    FAIL() << "expected aps::Error";
  } catch (const aps::Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 3"), std::string::npos) << e.what();
  }
}

TEST(CrossEntropyKernel, AllIgnoredGivesZeroLossAndGradient) {
  const aps::cpu::CrossEntropyShape s{2, 3, 2};
  const std::vector<float> logits = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<float> probs(12), grad(12, 7.0f);
  const std::vector<int64_t> targets(4, 255);
  EXPECT_EQ(aps::cpu::crossEntropyForward(probs.data(), logits.data(), targets.data(), s, 0.1f, 255), 0.0f);
  aps::cpu::crossEntropyBackward(grad.data(), probs.data(), targets.data(), s, 0.1f, 255, 1.0f);
  for (float g : grad) EXPECT_EQ(g, 0.0f);
}

}  // namespace
