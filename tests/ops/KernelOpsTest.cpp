// The autograd front ends of the CPU kernels: gradients against finite differences through
// the front end (argument plumbing, which gradients are requested) and argument validation.
#include "framework/autograd/ComputePrecision.h"
#include "framework/autograd/Engine.h"
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/core/Profile.h"
#include "framework/ops/BatchNorm.h"
#include "framework/ops/Conv.h"
#include "framework/ops/Elementwise.h"
#include "framework/ops/Loss.h"
#include "framework/ops/Pooling.h"
#include "framework/ops/Reduction.h"
#include "framework/ops/Upsample.h"
#include "tests/common/ErrorMessage.h"
#include "tests/ops/GradCheck.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace {

using aps::Tensor;
using aps::testing::expectGradientsMatch;
namespace ops = aps::ops;

Tensor randomInput(const aps::Shape& shape, uint64_t seed, bool requiresGrad = true) {
  aps::Rng rng(seed);
  Tensor t = Tensor::randn(shape, rng);
  if (requiresGrad) t.setRequiresGrad();
  return t;
}

// Distinct values 0.1 apart in a random order, so that max pooling has no near ties.
Tensor separatedInput(const aps::Shape& shape, uint64_t seed) {
  const int64_t n = aps::shapeNumel(shape);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i);
  aps::Rng rng(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[static_cast<size_t>(i)], v[rng.below(static_cast<uint64_t>(i + 1))]);
  Tensor t = Tensor::fromVector(v, shape);
  t.setRequiresGrad();
  return t;
}

using aps::testsupport::errorOf;

TEST(Conv2dOp, GradientsForStridePaddingDilationGroups) {
  ops::Conv2dOptions plain;
  plain.padH = plain.padW = 1;
  expectGradientsMatch([&](const auto& in) { return ops::conv2d(in[0], in[1], in[2], plain); },
                       {randomInput({2, 3, 5, 5}, 1), randomInput({4, 3, 3, 3}, 2), randomInput({4}, 3)});
  ops::Conv2dOptions strided;
  strided.strideH = 2;
  strided.strideW = 1;
  strided.padH = 1;
  strided.dilationW = 2;
  strided.groups = 2;
  expectGradientsMatch([&](const auto& in) { return ops::conv2d(in[0], in[1], Tensor(), strided); },
                       {randomInput({1, 4, 6, 7}, 4), randomInput({6, 2, 3, 2}, 5)});
  // Only the weight requires grad (the first layer of a network sees data).
  expectGradientsMatch([&](const auto& in) { return ops::conv2d(in[0], in[1], Tensor(), plain); },
                       {randomInput({2, 3, 4, 4}, 6, false), randomInput({2, 3, 3, 3}, 7)});
}

// The per-op profile (docs/PERFORMANCE.md) states each convolution pass's work: 2 x N x K x P x Q
// x C/g x R x S FLOPs for forward, backward-data and backward-weight alike.
TEST(Conv2dOp, ProfileCountsEachPassesFlops) {
  ops::Conv2dOptions o;
  o.strideH = o.strideW = 2;
  o.padH = o.padW = 1;
  o.groups = 2;
  const Tensor x = randomInput({3, 4, 9, 9}, 11), w = randomInput({6, 2, 3, 3}, 12);
  aps::profile::reset();
  aps::profile::setEnabled(true);
  Tensor y = ops::conv2d(x, w, Tensor(), o);  // (3, 6, 5, 5)
  aps::autograd::backward(ops::sum(y));
  aps::profile::setEnabled(false);
  const auto t = aps::profile::totals();
  const double flops = 2.0 * 3 * 6 * 5 * 5 * 2 * 3 * 3;
  for (const char* pass : {"conv.forward", "conv.backward_data", "conv.backward_weight"}) {
    ASSERT_EQ(t.count(pass), 1u) << pass;
    EXPECT_EQ(t.at(pass).calls, 1) << pass;
    EXPECT_EQ(t.at(pass).flops, flops) << pass;
    EXPECT_EQ(t.at(pass).bytes, 4.0 * (3 * 4 * 9 * 9 + 6 * 2 * 3 * 3 + 3 * 6 * 5 * 5)) << pass;
  }
  EXPECT_EQ(t.count("conv.backward_bias"), 0u);  // no bias
  aps::profile::reset();
}

TEST(Conv2dOp, RejectsBadArguments) {
  const Tensor x = Tensor::zeros({1, 3, 8, 8}), w = Tensor::zeros({4, 3, 3, 3});
  ops::Conv2dOptions o;
  o.strideH = 0;
  EXPECT_NE(errorOf([&] { ops::conv2d(x, w, Tensor(), o); }).find("conv2d: stride must be >= 1, got (0, 1)"),
            std::string::npos);
  o = {};
  o.padW = -1;
  EXPECT_NE(errorOf([&] { ops::conv2d(x, w, Tensor(), o); }).find("conv2d: padding must be >= 0, got (0, -1)"),
            std::string::npos);
  const std::string channels = errorOf([&] { ops::conv2d(Tensor::zeros({1, 2, 8, 8}), w, Tensor(), {}); });
  EXPECT_NE(channels.find("conv2d: input shape [1, 2, 8, 8] has 2 channels but weight shape [4, 3, 3, 3]"),
            std::string::npos)
      << channels;
  o = {};
  o.groups = 2;
  EXPECT_THROW(ops::conv2d(x, w, Tensor(), o), aps::Error);
  EXPECT_THROW(ops::conv2d(x, w, Tensor::zeros({5}), {}), aps::Error);
  EXPECT_THROW(ops::conv2d(Tensor::zeros({1, 3, 2, 2}), w, Tensor(), {}), aps::Error);  // output would be empty
  EXPECT_THROW(ops::conv2d(Tensor::zeros({3, 8, 8}), w, Tensor(), {}), aps::Error);
}

TEST(BatchNorm2dOp, TrainGradientsAndRunningStatistics) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  expectGradientsMatch([&](const auto& in) { return ops::batchNorm2d(in[0], in[1], in[2], rm, rv, true, 0.1f, 1e-5f); },
                       {randomInput({4, 3, 2, 2}, 8), randomInput({3}, 9), randomInput({3}, 10)}, {1e-2, 5e-3, 3e-2});
  // Running stats: one step from (0, 1) with momentum 0.1 and the unbiased batch variance.
  Tensor x = Tensor::fromVector({1, 2, 3, 4, 10, 20, 30, 40}, {2, 2, 2, 1});  // channel 0: 1,2,10,20
  Tensor mean = Tensor::zeros({2}), var = Tensor::ones({2});
  Tensor y = ops::batchNorm2d(x, Tensor::ones({2}), Tensor::zeros({2}), mean, var, true, 0.1f, 1e-5f);
  EXPECT_NEAR(mean.value({0}), 0.1 * 8.25, 1e-5);
  const double unbiased =
      (std::pow(1 - 8.25, 2) + std::pow(2 - 8.25, 2) + std::pow(10 - 8.25, 2) + std::pow(20 - 8.25, 2)) / 3.0;
  EXPECT_NEAR(var.value({0}), 0.9 + 0.1 * unbiased, 1e-4);
  // Eval mode normalises with the running statistics.
  Tensor evalOut = ops::batchNorm2d(x, Tensor::ones({2}), Tensor::zeros({2}), mean, var, false, 0.1f, 1e-5f);
  EXPECT_NEAR(evalOut.value({0, 0, 0, 0}), (1 - mean.value({0})) / std::sqrt(var.value({0}) + 1e-5), 1e-5);
  Tensor em = Tensor::fromVector({0.5f, -0.2f, 0.1f}, {3}), ev = Tensor::fromVector({0.7f, 1.3f, 2.0f}, {3});
  expectGradientsMatch(
      [&](const auto& in) { return ops::batchNorm2d(in[0], in[1], in[2], em, ev, false, 0.1f, 1e-5f); },
      {randomInput({2, 3, 2, 2}, 11), randomInput({3}, 12), randomInput({3}, 13)});
}

TEST(BatchNorm2dOp, RejectsMismatchedChannels) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  const std::string message = errorOf([&] {
    ops::batchNorm2d(Tensor::zeros({2, 4, 2, 2}), Tensor::ones({3}), Tensor::zeros({3}), rm, rv, true, 0.1f, 1e-5f);
  });
  EXPECT_NE(message.find("batchNorm2d: gamma shape [3] does not match 4 channels"), std::string::npos) << message;
  EXPECT_THROW(
      ops::batchNorm2d(Tensor::zeros({1, 3, 1, 1}), Tensor::ones({3}), Tensor::zeros({3}), rm, rv, true, 0.1f, 1e-5f),
      aps::Error);  // one value per channel: no batch variance
}

// The fused end of a residual block against the separate ops it replaces: output, running
// statistics and every gradient bit for bit, with and without a residual, in fp32 and the
// 16-bit compute modes (where the add stays separate), on 1 and 2 threads, for inputs,
// gammas and residuals that need no gradient too (the kernel's scratch path).
TEST(BatchNorm2dReluOp, SameBitsAsBatchNormAddRelu) {
  namespace ag = aps::autograd;
  using Mode = ag::ComputePrecision::Mode;
  struct Case {
    aps::Shape shape;
    bool residual, gradX, gradGamma, gradResidual;
  };
  const std::vector<Case> cases{{{4, 3, 5, 5}, true, true, true, true},    {{2, 6, 8, 8}, false, true, true, false},
                                {{3, 2, 7, 3}, true, false, true, true},   {{2, 4, 4, 4}, true, true, false, false},
                                {{2, 3, 6, 6}, false, false, true, false}, {{5, 2, 1, 3}, true, false, false, true}};
  for (Mode mode : {Mode::Fp32, Mode::Fp16Mixed, Mode::Fp16Pure, Mode::Bf16Mixed}) {
    for (int threads : {1, 2}) {
      for (size_t k = 0; k < cases.size(); ++k) {
        const Case& c = cases[k];
        const std::string what = std::string(ag::ComputePrecision(mode).name()) + ", " + std::to_string(threads) +
                                 " threads, case " + std::to_string(k);
        const int64_t channels = c.shape[1];
        const uint64_t seed = 100 + k;
        struct Run {
          Tensor y, x, gamma, beta, residual, mean, var;
        };
        auto run = [&](bool fused) {
          aps::ThreadCountGuard threadGuard(threads);
          Run r{Tensor(),
                randomInput(c.shape, seed, c.gradX),
                randomInput({channels}, seed + 1, c.gradGamma),
                randomInput({channels}, seed + 2),
                c.residual ? randomInput(c.shape, seed + 3, c.gradResidual) : Tensor(),
                randomInput({channels}, seed + 4, false),
                Tensor::ones({channels})};
          {
            ag::ComputePrecisionGuard guard{ag::ComputePrecision(mode)};
            // As in a network, batch norm reads op outputs (which a 16-bit mode has rounded).
            const Tensor x = ops::mul(r.x, 1.0f);
            const Tensor residual = c.residual ? ops::mul(r.residual, 1.0f) : Tensor();
            if (fused) {
              r.y = ops::batchNorm2dRelu(x, r.gamma, r.beta, r.mean, r.var, true, 0.1f, 1e-5f, residual);
            } else {
              const Tensor bn = ops::batchNorm2d(x, r.gamma, r.beta, r.mean, r.var, true, 0.1f, 1e-5f);
              r.y = ops::relu(c.residual ? ops::add(bn, residual) : bn);
            }
          }
          ag::backward(r.y, randomInput(c.shape, seed + 5, false));
          return r;
        };
        const Run fused = run(true), separate = run(false);
        auto expectSame = [&](const Tensor& a, const Tensor& b, const char* name) {
          ASSERT_EQ(a.defined(), b.defined()) << name << ", " << what;
          if (a.defined()) {
            EXPECT_EQ(a.toFloatVector(), b.toFloatVector()) << name << ", " << what;
          }
        };
        expectSame(fused.y, separate.y, "output");
        expectSame(fused.mean, separate.mean, "running mean");
        expectSame(fused.var, separate.var, "running var");
        expectSame(fused.x.grad(), separate.x.grad(), "input gradient");
        expectSame(fused.gamma.grad(), separate.gamma.grad(), "gamma gradient");
        expectSame(fused.beta.grad(), separate.beta.grad(), "beta gradient");
        if (c.residual) expectSame(fused.residual.grad(), separate.residual.grad(), "residual gradient");
        // The ReLU is in the output: some values are clipped, some pass.
        const std::vector<float> y = fused.y.toFloatVector();
        EXPECT_GT(std::count(y.begin(), y.end(), 0.0f), 0) << what;
        EXPECT_LT(std::count(y.begin(), y.end(), 0.0f), static_cast<long>(y.size())) << what;
      }
    }
  }
}

// The residual's gradient is the output's gradient under the ReLU's mask. The fused op masks
// the output's gradient in place where nothing else holds it, and leaves it alone where
// another tensor receives it too (an add hands the same gradient to both its inputs).
TEST(BatchNorm2dReluOp, MasksTheOutputGradientInPlaceOnlyWhereNothingElseHoldsIt) {
  namespace ag = aps::autograd;
  const aps::Shape shape{2, 3, 4, 4};
  const Tensor g = randomInput(shape, 36, false);
  for (bool shared : {false, true}) {
    Tensor mean = Tensor::zeros({3}), var = Tensor::ones({3});
    const Tensor x = randomInput(shape, 31), gamma = randomInput({3}, 32), beta = randomInput({3}, 33);
    const Tensor residual = randomInput(shape, 34), other = randomInput(shape, 35);
    // Recorded before batch norm, this product's backward runs after batch norm's and reads
    // the add's gradient then.
    const Tensor scaledOther = ops::mul(other, 1.0f);
    const Tensor y = ops::batchNorm2dRelu(x, gamma, beta, mean, var, true, 0.1f, 1e-5f, residual);
    // Alone: the product's backward makes a gradient that only batch norm's node holds.
    ag::backward(shared ? ops::add(y, scaledOther) : ops::mul(y, 1.0f), g);
    std::vector<float> masked = g.toFloatVector();
    const std::vector<float> out = y.toFloatVector();
    for (size_t i = 0; i < masked.size(); ++i) masked[i] = out[i] > 0.0f ? masked[i] : 0.0f;
    EXPECT_EQ(residual.grad().toFloatVector(), masked) << "shared " << shared;
    if (shared) {
      EXPECT_EQ(other.grad().toFloatVector(), g.toFloatVector());
    }
    EXPECT_GT(std::count(masked.begin(), masked.end(), 0.0f), 0);
  }
  EXPECT_NE(g.toFloatVector(), std::vector<float>(g.numel(), 0.0f));
}

// Eval mode runs the separate ops; a residual that broadcasts is added as ops::add would.
TEST(BatchNorm2dReluOp, EvalModeAndBroadcastResidual) {
  Tensor mean = Tensor::fromVector({0.5f, -0.2f}, {2}), var = Tensor::fromVector({0.7f, 1.3f}, {2});
  const Tensor x = randomInput({2, 2, 3, 3}, 21, false), gamma = randomInput({2}, 22), beta = randomInput({2}, 23);
  const Tensor residual = randomInput({2, 1, 3}, 24, false);
  for (bool training : {false, true}) {
    Tensor m1 = mean.clone(), v1 = var.clone(), m2 = mean.clone(), v2 = var.clone();
    const Tensor fused = ops::batchNorm2dRelu(x, gamma, beta, m1, v1, training, 0.1f, 1e-5f, residual);
    const Tensor separate =
        ops::relu(ops::add(ops::batchNorm2d(x, gamma, beta, m2, v2, training, 0.1f, 1e-5f), residual));
    EXPECT_EQ(fused.toFloatVector(), separate.toFloatVector()) << "training " << training;
    EXPECT_EQ(m1.toFloatVector(), m2.toFloatVector()) << "training " << training;
  }
  Tensor rm = Tensor::zeros({2}), rv = Tensor::ones({2});
  EXPECT_THROW(ops::batchNorm2dRelu(x, gamma, beta, rm, rv, true, 0.1f, 1e-5f, Tensor::zeros({2, 2, 3, 4})),
               aps::Error);  // shapes that do not broadcast
}

TEST(PoolingOps, Gradients) {
  ops::Pool2dOptions k3s2p1{3, 3, 2, 2, 1, 1};
  expectGradientsMatch([&](const auto& in) { return ops::maxPool2d(in[0], k3s2p1); },
                       {separatedInput({2, 2, 5, 5}, 14)}, {1e-2, 1e-3, 1e-2});
  ops::Pool2dOptions k2{2, 2, 0, 0, 0, 0};
  expectGradientsMatch([&](const auto& in) { return ops::maxPool2d(in[0], k2); }, {separatedInput({1, 2, 4, 6}, 15)},
                       {1e-2, 1e-3, 1e-2});
  for (bool include : {true, false}) {
    expectGradientsMatch([&](const auto& in) { return ops::avgPool2d(in[0], k3s2p1, include); },
                         {randomInput({2, 2, 5, 5}, 16)});
  }
  expectGradientsMatch([](const auto& in) { return ops::adaptiveAvgPool2d(in[0], 1, 1); },
                       {randomInput({2, 3, 4, 4}, 17)});
  expectGradientsMatch([](const auto& in) { return ops::adaptiveAvgPool2d(in[0], 3, 2); },
                       {randomInput({1, 2, 7, 5}, 18)});
  Tensor x = Tensor::fromVector({1, 2, 3, 4}, {1, 1, 2, 2});
  EXPECT_EQ(ops::adaptiveAvgPool2d(x, 1, 1).item(), 2.5f);
  EXPECT_EQ(ops::maxPool2d(x, k2).item(), 4.0f);
  EXPECT_THROW(ops::maxPool2d(x, {3, 3, 1, 1, 2, 2}), aps::Error);  // padding more than half the kernel
  EXPECT_THROW(ops::avgPool2d(x, {2, 2, -1, 1, 0, 0}), aps::Error);
  EXPECT_THROW(ops::adaptiveAvgPool2d(x, 0, 1), aps::Error);
}

TEST(UpsampleOp, GradientsAndShape) {
  expectGradientsMatch([](const auto& in) { return ops::upsampleBilinear(in[0], 7, 5); },
                       {randomInput({1, 2, 3, 4}, 19)});
  expectGradientsMatch([](const auto& in) { return ops::upsampleBilinear(in[0], 2, 3); },
                       {randomInput({1, 1, 5, 6}, 20)});
  Tensor c = Tensor::full({1, 1, 2, 2}, 3.0);
  for (float v : ops::upsampleBilinear(c, 5, 5).toFloatVector()) EXPECT_FLOAT_EQ(v, 3.0f);
}

TEST(CrossEntropyOp, ValuesGradientsSmoothingAndIgnoreIndex) {
  // Uniform logits: the loss is log(C) whatever the target.
  Tensor zeros = Tensor::zeros({2, 4});
  std::vector<int64_t> t2{1, 3};
  EXPECT_NEAR(ops::crossEntropy(zeros, Tensor::fromVector(t2, {2})).item(), std::log(4.0), 1e-6);
  std::vector<int64_t> targets{0, 2, 1};
  const Tensor tt = Tensor::fromVector(targets, {3});
  expectGradientsMatch([&](const auto& in) { return ops::crossEntropy(in[0], tt); }, {randomInput({3, 4}, 21)});
  expectGradientsMatch(
      [&](const auto& in) {
        return ops::crossEntropy(in[0], tt, {0.1f, -100});
      },
      {randomInput({3, 4}, 22)});
  std::vector<int64_t> pixels{0, 1, 255, 2, 2, 255, 0, 1};
  const Tensor tp = Tensor::fromVector(pixels, {2, 2, 2});
  expectGradientsMatch(
      [&](const auto& in) {
        return ops::crossEntropy(in[0], tp, {0.0f, 255});
      },
      {randomInput({2, 3, 2, 2}, 23)});
}

TEST(CrossEntropyOp, RejectsBadTargets) {
  const Tensor logits = Tensor::zeros({2, 3});
  const std::string dtype = errorOf([&] { ops::crossEntropy(logits, Tensor::zeros({2}, aps::DType::Int32)); });
  EXPECT_NE(dtype.find("crossEntropy: targets must be int64 class indices, got int32"), std::string::npos) << dtype;
  std::vector<int64_t> wrongShape{0, 1, 2};
  EXPECT_THROW(ops::crossEntropy(logits, Tensor::fromVector(wrongShape, {3})), aps::Error);
  std::vector<int64_t> outOfRange{0, 3};
  EXPECT_THROW(ops::crossEntropy(logits, Tensor::fromVector(outOfRange, {2})), aps::Error);
}

}  // namespace
