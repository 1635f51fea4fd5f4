#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/ops/Dropout.h"
#include "framework/ops/Elementwise.h"
#include "framework/ops/Linear.h"
#include "framework/ops/Reduction.h"
#include "framework/ops/Shaping.h"
#include "tests/common/ErrorMessage.h"
#include "tests/ops/GradCheck.h"

#include "framework/autograd/Function.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

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

using aps::testsupport::errorOf;

// The checker itself must catch a wrong backward (here: off by a factor of 2).
TEST(GradCheck, DetectsAWrongGradient) {
  const auto wrongSquare = [](const std::vector<Tensor>& in) {
    Tensor out = ops::mul(in[0].detach(), in[0].detach());
    const Tensor x = in[0].detach();
    return aps::autograd::recordFunction(out, "WrongSquare", {in[0]},
                                         [x](const Tensor& g) { return std::vector<Tensor>{ops::mul(g, x)}; });
  };
  EXPECT_NONFATAL_FAILURE(expectGradientsMatch(wrongSquare, {randomInput({1}, 99)}), "analytic");
}

TEST(Elementwise, ForwardValuesAndBroadcasting) {
  Tensor a = Tensor::fromVector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::fromVector({10, 20, 30}, {3});
  EXPECT_EQ((a + b).toFloatVector(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ((a - b).toFloatVector(), (std::vector<float>{-9, -18, -27, -6, -15, -24}));
  EXPECT_EQ((a * b).toFloatVector(), (std::vector<float>{10, 40, 90, 40, 100, 180}));
  EXPECT_EQ((a * 2.0f).toFloatVector(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(ops::addScalar(a, 0.5f).toFloatVector(), (std::vector<float>{1.5, 2.5, 3.5, 4.5, 5.5, 6.5}));
  EXPECT_EQ(ops::relu(a - Tensor::scalar(3.0f)).toFloatVector(), (std::vector<float>{0, 0, 0, 1, 2, 3}));
  // Per-channel bias (C, 1, 1) onto (N, C, H, W).
  Tensor x = Tensor::zeros({2, 3, 2, 2});
  Tensor bias = Tensor::fromVector({1, 2, 3}, {3, 1, 1});
  Tensor y = x + bias;
  EXPECT_EQ(y.sizes(), (aps::Shape{2, 3, 2, 2}));
  EXPECT_EQ(y.value({1, 2, 1, 0}), 3.0);
}

TEST(Elementwise, ShapeErrorsNameBothShapes) {
  const std::string message = errorOf([] { ops::add(Tensor::zeros({2, 3}), Tensor::zeros({3, 2})); });
  EXPECT_NE(message.find("add: shapes [2, 3] and [3, 2] do not match"), std::string::npos) << message;
  const std::string dtype = errorOf([] { ops::mul(Tensor::zeros({2}), Tensor::zeros({2}, aps::DType::Int64)); });
  EXPECT_NE(dtype.find("mul: second input must be float32, got int64"), std::string::npos) << dtype;
}

TEST(Elementwise, GradientsMatchFiniteDifferences) {
  expectGradientsMatch([](const auto& in) { return ops::add(in[0], in[1]); },
                       {randomInput({2, 3, 2, 2}, 1), randomInput({3, 1, 1}, 2)});
  expectGradientsMatch([](const auto& in) { return ops::sub(in[0], in[1]); },
                       {randomInput({4, 3}, 3), randomInput({3}, 4)});
  expectGradientsMatch([](const auto& in) { return ops::mul(in[0], in[1]); },
                       {randomInput({2, 3}, 5), randomInput({2, 1}, 6)});
  expectGradientsMatch([](const auto& in) { return ops::mul(in[0], 2.5f); }, {randomInput({5}, 7)});
  expectGradientsMatch([](const auto& in) { return ops::relu(in[0]); }, {randomInput({20}, 8)});
  expectGradientsMatch([](const auto& in) { return ops::addScalar(in[0], -0.75f); }, {randomInput({5}, 10)});
  expectGradientsMatch([](const auto& in) { return ops::mul(in[0], in[0]); }, {randomInput({6}, 9)});
}

TEST(Reduction, SumMeanValuesAndGradients) {
  Tensor a = Tensor::fromVector({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(ops::sum(a).item(), 21.0f);
  EXPECT_EQ(ops::mean(a).item(), 3.5f);
  EXPECT_EQ(ops::sum(a, {0}).toFloatVector(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(ops::sum(a, {1}, true).sizes(), (aps::Shape{2, 1}));
  EXPECT_EQ(ops::mean(a, {-1}).toFloatVector(), (std::vector<float>{2, 5}));
  expectGradientsMatch([](const auto& in) { return ops::sum(in[0]); }, {randomInput({3, 4}, 10)});
  expectGradientsMatch([](const auto& in) { return ops::mean(in[0]); }, {randomInput({3, 4}, 11)});
  expectGradientsMatch([](const auto& in) { return ops::sum(in[0], {0, 2}); }, {randomInput({2, 3, 4}, 12)});
  expectGradientsMatch([](const auto& in) { return ops::mean(in[0], {1}, true); }, {randomInput({2, 3, 4}, 13)});
}

TEST(Reduction, ArgmaxAlongADim) {
  Tensor logits = Tensor::fromVector({0, 5, 1, 7, 7, 2}, {2, 3});
  EXPECT_EQ(ops::argmax(logits, 1).toVector<int64_t>(), (std::vector<int64_t>{1, 0}));  // first of ties
  EXPECT_EQ(ops::argmax(logits, 0).toVector<int64_t>(), (std::vector<int64_t>{1, 1, 1}));
  Tensor pixels = Tensor::zeros({1, 3, 2, 2});  // (N, C, H, W) -> (N, H, W) class map
  pixels.setValue({0, 2, 0, 1}, 1.0);
  pixels.setValue({0, 1, 1, 0}, 1.0);
  EXPECT_EQ(ops::argmax(pixels, 1).toVector<int64_t>(), (std::vector<int64_t>{0, 2, 1, 0}));
  EXPECT_EQ(ops::argmax(pixels, 1).sizes(), (aps::Shape{1, 2, 2}));
}

TEST(Reduction, FullSumDoesNotDependOnTheThreadCount) {
  Tensor x = randomInput({100003}, 14, false);
  aps::setNumThreads(1);
  const float one = ops::sum(x).item();
  aps::setNumThreads(2);
  const float two = ops::sum(x).item();
  aps::setNumThreads(3);
  EXPECT_EQ(ops::sum(x).item(), one);
  EXPECT_EQ(two, one);
  aps::setNumThreads(2);
}

TEST(Linear, ForwardAndGradients) {
  Tensor x = Tensor::fromVector({1, 2, 3, 4}, {2, 2});
  Tensor w = Tensor::fromVector({1, 0, 0, 1, 1, 1}, {3, 2});
  Tensor b = Tensor::fromVector({0.5f, 0, -1}, {3});
  EXPECT_EQ(ops::linear(x, w, b).toFloatVector(), (std::vector<float>{1.5f, 2, 2, 3.5f, 4, 6}));
  expectGradientsMatch([](const auto& in) { return ops::linear(in[0], in[1], in[2]); },
                       {randomInput({4, 5}, 15), randomInput({3, 5}, 16), randomInput({3}, 17)});
  expectGradientsMatch([](const auto& in) { return ops::linear(in[0], in[1]); },
                       {randomInput({4, 5}, 18, false), randomInput({3, 5}, 19)});
  expectGradientsMatch([](const auto& in) { return ops::matmul(in[0], in[1]); },
                       {randomInput({3, 4}, 20), randomInput({4, 2}, 21)});
  EXPECT_THROW(ops::linear(Tensor::zeros({2, 4}), Tensor::zeros({3, 5})), aps::Error);
}

TEST(Shaping, ReshapeFlattenPermuteNarrowConcat) {
  expectGradientsMatch(
      [](const auto& in) {
        return ops::mul(ops::reshape(in[0], {3, 4}), in[1]);
      },
      {randomInput({2, 6}, 22), randomInput({3, 4}, 23)});
  Tensor f = ops::flatten(randomInput({2, 3, 4, 5}, 24));
  EXPECT_EQ(f.sizes(), (aps::Shape{2, 60}));
  expectGradientsMatch([](const auto& in) { return ops::mul(ops::flatten(in[0]), in[1]); },
                       {randomInput({2, 3, 2}, 25), randomInput({2, 6}, 26)});
  expectGradientsMatch([](const auto& in) { return ops::permute(in[0], {2, 0, 1}); }, {randomInput({2, 3, 4}, 27)});
  expectGradientsMatch([](const auto& in) { return ops::narrow(in[0], 1, 1, 2); }, {randomInput({2, 4}, 28)});
  Tensor a = Tensor::fromVector({1, 2}, {1, 2}), b = Tensor::fromVector({3, 4, 5, 6}, {2, 2});
  EXPECT_EQ(ops::concat({a, b}, 0).toFloatVector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  expectGradientsMatch(
      [](const auto& in) {
        return ops::concat({in[0], in[1], in[0]}, 1);
      },
      {randomInput({2, 1, 3}, 29), randomInput({2, 2, 3}, 30)});
  EXPECT_THROW(ops::concat({Tensor::zeros({2, 3}), Tensor::zeros({3, 2})}, 0), aps::Error);
}

TEST(Dropout, ReproducibleScaledAndIdentityInEval) {
  Tensor x = Tensor::ones({10000}).setRequiresGrad();
  Tensor a = ops::dropout(x, 0.3f, true, 42, 7);
  Tensor b = ops::dropout(x, 0.3f, true, 42, 7);
  EXPECT_EQ(a.toFloatVector(), b.toFloatVector());
  EXPECT_NE(a.toFloatVector(), ops::dropout(x, 0.3f, true, 42, 8).toFloatVector());
  int zeros = 0;
  for (float v : a.toFloatVector()) {
    if (v == 0.0f) {
      ++zeros;
    } else {
      EXPECT_FLOAT_EQ(v, 1.0f / 0.7f);
    }
  }
  EXPECT_NEAR(zeros / 10000.0, 0.3, 0.02);
  EXPECT_TRUE(ops::dropout(x, 0.3f, false, 42, 7).sameAs(x));
  expectGradientsMatch([](const auto& in) { return ops::dropout(in[0], 0.5f, true, 1, 2); }, {randomInput({50}, 31)});
  EXPECT_THROW(ops::dropout(x, 1.5f, true, 1, 1), aps::Error);
}

}  // namespace
