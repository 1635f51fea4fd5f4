#include "framework/autograd/Engine.h"
#include "framework/core/Error.h"
#include "framework/nn/Linear.h"
#include "framework/ops/Elementwise.h"
#include "framework/ops/Loss.h"
#include "framework/optim/AdamW.h"
#include "framework/optim/Lars.h"
#include "framework/optim/Sgd.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <functional>

namespace {

using aps::NamedTensors;
using aps::Tensor;
namespace optim = aps::optim;

NamedTensors oneParam(std::initializer_list<float> values, const aps::Shape& shape) {
  Tensor p = Tensor::fromVector(values, shape).setRequiresGrad();
  return {{"w", p}};
}

void setGrad(const NamedTensors& params, size_t i, std::initializer_list<float> g) {
  Tensor param = params[i].tensor;
  param.setGrad(Tensor::fromVector(g, param.sizes()));
}

TEST(Sgd, HandComputedSteps) {
  // Plain: p -= lr * g.
  auto plain = oneParam({1.0f, -2.0f}, {2});
  optim::Sgd sgd(plain, {.lr = 0.1});
  setGrad(plain, 0, {0.5f, -1.0f});
  sgd.step();
  EXPECT_EQ(plain[0].tensor.toFloatVector(), (std::vector<float>{1.0f - 0.1f * 0.5f, -2.0f + 0.1f}));

  // Momentum 0.9 with weight decay 0.1: d1 = g + 0.1 p; buf1 = d1; p1 = p0 - lr buf1;
  // d2 = g + 0.1 p1; buf2 = 0.9 buf1 + d2; p2 = p1 - lr buf2.
  auto mom = oneParam({1.0f}, {1, 1});
  optim::Sgd heavy(mom, {.lr = 0.1, .momentum = 0.9, .weightDecay = 0.1});
  setGrad(mom, 0, {0.5f});
  heavy.step();
  const float d1 = 0.5f + 0.1f * 1.0f, p1 = 1.0f - 0.1f * d1;
  EXPECT_FLOAT_EQ(mom[0].tensor.item(), p1);
  heavy.step();
  const float d2 = 0.5f + 0.1f * p1, buf2 = 0.9f * d1 + d2;
  EXPECT_FLOAT_EQ(mom[0].tensor.item(), p1 - 0.1f * buf2);

  // Nesterov: p -= lr * (d + momentum * buf).
  auto nes = oneParam({1.0f}, {1, 1});
  optim::Sgd nesterov(nes, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  setGrad(nes, 0, {0.5f});
  nesterov.step();
  EXPECT_FLOAT_EQ(nes[0].tensor.item(), 1.0f - 0.1f * (0.5f + 0.9f * 0.5f));
  EXPECT_THROW(optim::Sgd(nes, {.lr = 0.1, .nesterov = true}), aps::Error);
}

TEST(Sgd, ExcludesBiasAndNormFromDecayWhenAsked) {
  Tensor w = Tensor::fromVector({1.0f, 1.0f}, {1, 2}).setRequiresGrad();
  Tensor b = Tensor::fromVector({1.0f}, {1}).setRequiresGrad();
  NamedTensors params{{"fc.weight", w}, {"fc.bias", b}};
  optim::Sgd sgd(params, {.lr = 1.0, .weightDecay = 0.5, .excludeBiasAndNormFromDecay = true});
  w.setGrad(Tensor::zeros({1, 2}));
  b.setGrad(Tensor::zeros({1}));
  sgd.step();
  EXPECT_EQ(w.toFloatVector(), (std::vector<float>{0.5f, 0.5f}));  // decayed
  EXPECT_EQ(b.item(), 1.0f);                                       // not decayed
}

TEST(Sgd, SkipsParametersWithoutGradient) {
  auto params = oneParam({3.0f}, {1});
  optim::Sgd sgd(params, {.lr = 1.0, .momentum = 0.9});
  sgd.step();
  EXPECT_EQ(params[0].tensor.item(), 3.0f);
}

TEST(Lars, HandComputedTrustRatio) {
  // w = (3, 4): ||w|| = 5; g = (0, 1): ||g|| = 1; wd = 0.1, eta = 0.001.
  Tensor w = Tensor::fromVector({3.0f, 4.0f}, {1, 2}).setRequiresGrad();
  Tensor b = Tensor::fromVector({1.0f}, {1}).setRequiresGrad();
  NamedTensors params{{"w", w}, {"b", b}};
  optim::Lars lars(params, {.lr = 2.0, .momentum = 0.9, .weightDecay = 0.1, .trustCoefficient = 0.001, .eps = 0.0});
  w.setGrad(Tensor::fromVector({0.0f, 1.0f}, {1, 2}));
  b.setGrad(Tensor::fromVector({0.5f}, {1}));
  const double local = 0.001 * 5.0 / (1.0 + 0.1 * 5.0);
  EXPECT_NEAR(lars.localLr(0), local, 1e-12);
  EXPECT_EQ(lars.localLr(1), 1.0);  // bias: excluded
  lars.step();
  const float scaled = static_cast<float>(2.0 * local);
  EXPECT_FLOAT_EQ(w.value({0, 0}), 3.0f - scaled * (0.0f + 0.1f * 3.0f));
  EXPECT_FLOAT_EQ(w.value({0, 1}), 4.0f - scaled * (1.0f + 0.1f * 4.0f));
  EXPECT_FLOAT_EQ(b.item(), 1.0f - 2.0f * 0.5f);
  // Zero gradient: trust ratio falls back to 1.
  w.setGrad(Tensor::zeros({1, 2}));
  EXPECT_EQ(lars.localLr(0), 1.0);
}

TEST(AdamW, FirstStepIsSignTimesLrAfterDecay) {
  auto params = oneParam({1.0f, -1.0f}, {2});
  optim::AdamW adam(params, {.lr = 0.01, .weightDecay = 0.5});
  setGrad(params, 0, {3.0f, -0.2f});
  adam.step();
  // m_hat = g, v_hat = g^2 on the first step: update = lr * g / (|g| + eps).
  EXPECT_NEAR(params[0].tensor.value({0}), 1.0f * (1 - 0.005f) - 0.01f, 1e-6);
  EXPECT_NEAR(params[0].tensor.value({1}), -1.0f * (1 - 0.005f) + 0.01f, 1e-6);
}

// torch.optim trajectories from tools/fixtures/optim_fixtures.py.
class TorchFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream in(std::string(APS_SOURCE_DIR) + "/tests/fixtures/optim/torch_optim.json");
    ASSERT_TRUE(in.good());
    fixture_ = nlohmann::json::parse(in);
  }
  static Tensor tensorOf(const nlohmann::json& values, const aps::Shape& shape) {
    return Tensor::fromVector(values.get<std::vector<float>>(), shape);
  }
  void expectTrajectory(const std::string& key,
                        const std::function<std::unique_ptr<optim::Optimizer>(NamedTensors)>& make, float tolerance) {
    Tensor w = tensorOf(fixture_["weight"], {2, 3}).setRequiresGrad();
    Tensor b = tensorOf(fixture_["bias"], {3}).setRequiresGrad();
    auto opt = make({{"weight", w}, {"bias", b}});
    for (size_t step = 0; step < 3; ++step) {
      w.setGrad(tensorOf(fixture_["grads"][step]["weight"], {2, 3}));
      b.setGrad(tensorOf(fixture_["grads"][step]["bias"], {3}));
      opt->step();
      const auto ew = fixture_[key][step]["weight"].get<std::vector<float>>();
      const auto eb = fixture_[key][step]["bias"].get<std::vector<float>>();
      const auto gw = w.toFloatVector(), gb = b.toFloatVector();
      for (size_t i = 0; i < ew.size(); ++i) EXPECT_NEAR(gw[i], ew[i], tolerance) << key << " step " << step;
      for (size_t i = 0; i < eb.size(); ++i) EXPECT_NEAR(gb[i], eb[i], tolerance) << key << " step " << step;
    }
  }
  nlohmann::json fixture_;
};

TEST_F(TorchFixture, SgdNesterovWeightDecay) {
  expectTrajectory(
      "sgd_nesterov",
      [](NamedTensors p) {
        return std::make_unique<optim::Sgd>(
            p, optim::SgdOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true, .weightDecay = 1e-2});
      },
      1e-6f);
}

TEST_F(TorchFixture, SgdDampening) {
  expectTrajectory(
      "sgd_dampening",
      [](NamedTensors p) {
        return std::make_unique<optim::Sgd>(p, optim::SgdOptions{.lr = 0.05, .momentum = 0.8, .dampening = 0.3});
      },
      1e-6f);
}

TEST_F(TorchFixture, AdamW) {
  expectTrajectory(
      "adamw",
      [](NamedTensors p) {
        return std::make_unique<optim::AdamW>(
            p, optim::AdamWOptions{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weightDecay = 0.1});
      },
      2e-6f);
}

TEST(OptimizerState, RoundTripResumesBitForBit) {
  for (int kind = 0; kind < 3; ++kind) {
    const auto make = [kind](NamedTensors p) -> std::unique_ptr<optim::Optimizer> {
      if (kind == 0) return std::make_unique<optim::Sgd>(p, optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
      if (kind == 1) return std::make_unique<optim::Lars>(p, optim::LarsOptions{.lr = 1.0, .weightDecay = 1e-4});
      return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 0.01});
    };
    aps::Rng rng(kind);
    Tensor a = Tensor::randn({4, 3}, rng).setRequiresGrad();
    auto optA = make({{"p", a}});
    const Tensor g1 = Tensor::randn({4, 3}, rng), g2 = Tensor::randn({4, 3}, rng);
    a.setGrad(g1.clone());
    optA->step();
    // Snapshot: a fresh optimizer on a copy of the parameters, restored from the state.
    Tensor b = a.clone().setRequiresGrad();
    auto optB = make({{"p", b}});
    optB->loadStateDict(optA->stateDict());
    EXPECT_EQ(optB->stepCount(), 1);
    a.setGrad(g2.clone());
    b.setGrad(g2.clone());
    optA->step();
    optB->step();
    EXPECT_EQ(a.toFloatVector(), b.toFloatVector()) << "optimizer kind " << kind;
  }
  Tensor p = Tensor::zeros({2}).setRequiresGrad();
  optim::Sgd sgd({{"p", p}}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_THROW(
      sgd.loadStateDict({{"momentum_buffer.q", Tensor::zeros({2})}, {"step", Tensor::zeros({}, aps::DType::Int64)}}),
      aps::Error);
  EXPECT_THROW(
      sgd.loadStateDict({{"momentum_buffer.p", Tensor::zeros({3})}, {"step", Tensor::zeros({}, aps::DType::Int64)}}),
      aps::Error);
  EXPECT_THROW(sgd.loadStateDict({}), aps::Error);
}

TEST(Sgd, TrainsASmallClassifier) {
  aps::Rng rng(11);
  aps::nn::Linear fc(4, 3, rng);
  const Tensor x = Tensor::randn({12, 4}, rng);
  std::vector<int64_t> labels;
  for (int i = 0; i < 12; ++i) labels.push_back(i % 3);
  const Tensor y = Tensor::fromVector(labels, {12});
  optim::Sgd sgd(fc.namedParameters(), {.lr = 0.5, .momentum = 0.9});
  float first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    sgd.zeroGrad();
    Tensor loss = aps::ops::crossEntropy(fc.forward(x), y);
    if (step == 0) first = loss.item();
    last = loss.item();
    aps::autograd::backward(loss);
    sgd.step();
  }
  EXPECT_LT(last, 0.5f * first);
}

}  // namespace
