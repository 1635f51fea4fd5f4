// Compute precision on single ops (framework/autograd/ComputePrecision.h): outputs and
// gradients are rounded to the format, exactly; mixed modes read rounded copies of fp32
// master weights and leave the masters and their fp32 gradients alone.
#include "framework/autograd/ComputePrecision.h"
#include "framework/autograd/Engine.h"
#include "framework/core/Rng.h"
#include "framework/ops/BatchNorm.h"
#include "framework/ops/Conv.h"
#include "framework/ops/Elementwise.h"
#include "framework/ops/Linear.h"
#include "framework/ops/Loss.h"
#include "framework/numerics/FormatRounding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

using aps::Rng;
using aps::Tensor;
namespace ag = aps::autograd;
namespace ops = aps::ops;
using ag::ComputePrecision;
using aps::precision::ComputeFormat;
using Mode = ComputePrecision::Mode;

Tensor rounded(const Tensor& t, ComputeFormat f) {
  Tensor c = t.detach().clone();
  aps::precision::roundInPlace(c, f);
  return c;
}

Tensor leaf(const Tensor& t) {
  Tensor c = t.detach().clone();
  c.setRequiresGrad();
  return c;
}

void expectSameValues(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_EQ(a.toFloatVector(), b.toFloatVector()) << what;
}

const std::vector<Mode> kModes{Mode::Fp16Mixed, Mode::Fp16Pure, Mode::Bf16Mixed, Mode::Bf16Pure};

// y = linear(x, W, b) under each mode against the same op run in fp32 on the rounded
// operands, with its output and gradients rounded where the mode says.
TEST(ComputePrecisionOps, LinearMatchesFp32OnRoundedOperandsThenRounded) {
  Rng rng(3);
  const Tensor x = Tensor::randn({6, 5}, rng), w0 = Tensor::randn({4, 5}, rng), b0 = Tensor::randn({4}, rng);
  const Tensor seed = Tensor::randn({6, 4}, rng);
  for (Mode mode : kModes) {
    const ComputePrecision p(mode);
    const ComputeFormat f = p.format();
    // Pure parameters are format values (the optimizer keeps them so); mixed ones are fp32.
    Tensor w = leaf(p.isPure() ? rounded(w0, f) : w0), b = leaf(p.isPure() ? rounded(b0, f) : b0);
    Tensor y;
    {
      ag::ComputePrecisionGuard guard(p);
      y = ops::linear(x, w, b);
    }
    ag::backward(y, seed);

    Tensor wr = leaf(rounded(w0, f)), br = leaf(rounded(b0, f));
    const Tensor yr = ops::linear(rounded(x, f), wr, br);
    ag::backward(yr, seed);
    expectSameValues(y, rounded(yr, f), p.name());
    EXPECT_GT(aps::precision::countNotRepresentable(yr, f), 0);  // the fp32 result is not: the test can tell
    // Mixed: the cast's gradient is rounded, then lands in the fp32 master's grad.
    expectSameValues(w.grad(), rounded(wr.grad(), f), std::string(p.name()) + " weight grad");
    expectSameValues(b.grad(), rounded(br.grad(), f), std::string(p.name()) + " bias grad");
    if (p.isMixed()) expectSameValues(w, w0, "master weight untouched");
  }
}

TEST(ComputePrecisionOps, Conv2dPureOutputAndInputGradientAreRounded) {
  Rng rng(5);
  const Tensor x0 = Tensor::randn({2, 3, 6, 6}, rng), w0 = Tensor::randn({4, 3, 3, 3}, rng);
  const Tensor seed = Tensor::randn({2, 4, 6, 6}, rng);
  ops::Conv2dOptions o;
  o.padH = o.padW = 1;
  for (ComputeFormat f : {ComputeFormat::Fp16, ComputeFormat::BFloat16}) {
    const ComputePrecision p(f == ComputeFormat::Fp16 ? Mode::Fp16Pure : Mode::Bf16Pure);
    Tensor x = leaf(rounded(x0, f)), w = leaf(rounded(w0, f));
    Tensor y;
    {
      ag::ComputePrecisionGuard guard(p);
      y = ops::relu(ops::conv2d(x, w, Tensor(), o));
    }
    ag::backward(y, seed);
    Tensor xr = leaf(rounded(x0, f)), wr = leaf(rounded(w0, f));
    const Tensor conv = ops::conv2d(xr, wr, Tensor(), o);
    const Tensor convRounded = leaf(rounded(conv, f));
    const Tensor yr = ops::relu(convRounded);
    ag::backward(yr, seed);
    expectSameValues(y, yr, p.name());
    // relu's input gradient is rounded (it is the conv output's gradient), then conv's.
    const Tensor gConv = rounded(convRounded.grad(), f);
    ag::backward(conv, gConv);
    expectSameValues(x.grad(), rounded(xr.grad(), f), std::string(p.name()) + " input grad");
    expectSameValues(w.grad(), rounded(wr.grad(), f), std::string(p.name()) + " weight grad");
  }
}

TEST(ComputePrecisionOps, ElementwiseOutputsAreRounded) {
  const Tensor a = Tensor::fromVector({1.0f, 1024.0f}, {2}), b = Tensor::fromVector({0x1p-11f, 0.5f}, {2});
  ag::ComputePrecisionGuard guard{ComputePrecision(Mode::Fp16Pure)};
  // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: even is 1; 1024.5 ties to 1024.
  EXPECT_EQ(ops::add(a, b).toFloatVector(), (std::vector<float>{1.0f, 1024.0f}));
}

// Batch norm follows cuDNN under autocast in mixed modes: fp32 gamma/beta and their fp32
// gradients; its output and input gradient are 16-bit. In pure modes everything is.
TEST(ComputePrecisionOps, BatchNormGammaGradientIsFp32OnlyInMixedModes) {
  Rng rng(9);
  const Tensor x0 = Tensor::randn({4, 3, 5, 5}, rng), seed = Tensor::randn({4, 3, 5, 5}, rng);
  for (Mode mode : kModes) {
    const ComputePrecision p(mode);
    const ComputeFormat f = p.format();
    Tensor x = leaf(rounded(x0, f));
    Tensor gamma = leaf(Tensor::ones({3})), beta = leaf(Tensor::zeros({3}));
    Tensor mean = Tensor::zeros({3}), var = Tensor::ones({3});
    Tensor y;
    {
      ag::ComputePrecisionGuard guard(p);
      y = ops::batchNorm2d(ops::mul(x, 1.0f), gamma, beta, mean, var, true, 0.1f, 1e-5f);
    }
    EXPECT_EQ(aps::precision::countNotRepresentable(y, f), 0) << p.name();
    ag::backward(y, seed);
    EXPECT_EQ(aps::precision::countNotRepresentable(x.grad(), f), 0) << p.name();
    EXPECT_EQ(aps::precision::countNotRepresentable(gamma.grad(), f) > 0, p.isMixed()) << p.name();
    EXPECT_EQ(aps::precision::countNotRepresentable(beta.grad(), f) > 0, p.isMixed()) << p.name();
  }
}

// Cross entropy is on autocast's fp32 list: an fp32 loss in mixed modes, 16-bit in pure.
TEST(ComputePrecisionOps, CrossEntropyIsFp32InMixedModes) {
  Rng rng(11);
  const Tensor logits0 = Tensor::randn({8, 5}, rng);
  const Tensor targets = Tensor::fromVector(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2}, {8});
  for (Mode mode : kModes) {
    const ComputePrecision p(mode);
    const ComputeFormat f = p.format();
    Tensor logits = leaf(rounded(logits0, f));
    const Tensor reference = ops::crossEntropy(logits.detach(), targets);
    ASSERT_FALSE(aps::precision::isRepresentable(reference.item(), f));
    Tensor loss;
    {
      ag::ComputePrecisionGuard guard(p);
      loss = ops::crossEntropy(ops::mul(logits, 1.0f), targets);
    }
    EXPECT_EQ(loss.item(), p.isMixed() ? reference.item() : aps::precision::roundNearestEven(reference.item(), f))
        << p.name();
    // The loss scale (root gradient) is not rounded even where it overflows fp16.
    ag::backward(loss, Tensor::scalar(65536.0f));
    EXPECT_EQ(aps::precision::countNotRepresentable(logits.grad(), f), 0);
    for (float g : logits.grad().toFloatVector()) EXPECT_TRUE(std::isfinite(g));
  }
}

}  // namespace
