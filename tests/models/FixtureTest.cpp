// Forward (and for ResNet-20 also backward) against PyTorch 1.13: the fixtures come from
// tools/fixtures/make_model_fixtures.py, which defines the same networks in PyTorch, sets
// random weights and non-trivial BN statistics, and records inputs and outputs.
#include "framework/autograd/Engine.h"
#include "framework/autograd/GradMode.h"
#include "framework/io/Safetensors.h"
#include "framework/ops/Loss.h"
#include "models/ModelRegistry.h"
#include "models/ResNet.h"
#include "models/Weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

namespace {

using aps::NamedTensors;
using aps::Tensor;

struct Fixture {
  NamedTensors weights;                 // the state dict entries
  std::map<std::string, Tensor> extra;  // input, output, ... (names listed in the script)
};

bool isExtra(const std::string& name) {
  return name == "input" || name == "output" || name == "train_output" || name == "target" ||
         name.rfind("grad.", 0) == 0;
}

Fixture readFixture(const std::string& name) {
  const auto contents = aps::io::loadSafetensors(std::string(APS_SOURCE_DIR) + "/tests/fixtures/models/" + name);
  Fixture f;
  for (const auto& t : contents.tensors) {
    if (isExtra(t.name)) {
      f.extra[t.name] = t.tensor;
    } else {
      f.weights.push_back(t);
    }
  }
  return f;
}

// max |actual - expected| / max |expected|: relative to the output's scale, so that outputs
// near zero do not dominate.
double maxRelativeError(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.sizes(), expected.sizes());
  const auto a = actual.toFloatVector();
  const auto e = expected.toFloatVector();
  if (a.size() != e.size()) return INFINITY;
  double maxDiff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    maxDiff = std::max(maxDiff, std::abs(static_cast<double>(a[i]) - e[i]));
    scale = std::max(scale, std::abs(static_cast<double>(e[i])));
  }
  return maxDiff / scale;
}

constexpr double kTolerance = 1e-4;

TEST(ModelFixtures, ResNet20EvalMatchesPyTorch) {
  const Fixture f = readFixture("resnet20.safetensors");
  auto model = aps::models::createModel("resnet20", {.seed = 3});
  aps::models::loadState(*model, f.weights, "resnet20.safetensors");
  model->eval();
  aps::autograd::NoGradGuard noGrad;
  const Tensor out = model->forward(f.extra.at("input"));
  EXPECT_LT(maxRelativeError(out, f.extra.at("output")), kTolerance);
}

TEST(ModelFixtures, ResNet20TrainStepMatchesPyTorch) {
  const Fixture f = readFixture("resnet20.safetensors");
  auto model = aps::models::createModel("resnet20", {.seed = 3});
  aps::models::loadState(*model, f.weights, "resnet20.safetensors");
  model->train();
  const Tensor out = model->forward(f.extra.at("input"));  // batch statistics
  EXPECT_LT(maxRelativeError(out, f.extra.at("train_output")), kTolerance);
  aps::autograd::backward(aps::ops::crossEntropy(out, f.extra.at("target")));
  std::map<std::string, Tensor> params;
  for (const auto& p : model->namedParameters()) params[p.name] = p.tensor;
  for (const char* name : {"conv1.weight", "layer3.2.conv2.weight", "fc.weight"}) {
    ASSERT_TRUE(params.at(name).grad().defined()) << name;
    EXPECT_LT(maxRelativeError(params.at(name).grad(), f.extra.at(std::string("grad.") + name)), kTolerance) << name;
  }
}

TEST(ModelFixtures, FcnResNet20EvalMatchesPyTorch) {
  // The FCN's backbone weights are ResNet-20's (see the script), its head is in its own file.
  const Fixture backbone = readFixture("resnet20.safetensors");
  const Fixture head = readFixture("fcn_resnet20.safetensors");
  NamedTensors state;
  for (const auto& t : backbone.weights) {
    if (t.name.rfind("fc.", 0) != 0) state.push_back({"backbone." + t.name, t.tensor});
  }
  state.insert(state.end(), head.weights.begin(), head.weights.end());
  auto model = aps::models::createModel("fcn_resnet20", {.numClasses = 5});
  aps::models::loadState(*model, state, "fcn_resnet20 fixtures");
  model->eval();
  aps::autograd::NoGradGuard noGrad;
  const Tensor out = model->forward(head.extra.at("input"));
  EXPECT_LT(maxRelativeError(out, head.extra.at("output")), kTolerance);
}

TEST(ModelFixtures, DilatedBottleneckResNetMatchesPyTorch) {
  // ImageNet stem with max pool, bottleneck blocks with projections, a dilated last stage.
  aps::models::ResNetSpec spec;
  spec.block = aps::models::ResNetBlockKind::Bottleneck;
  spec.stemWidth = 8;
  spec.blocks = {1, 1};
  spec.widths = {8, 16};
  spec.dilate = {false, true};
  spec.inChannels = 1;
  spec.numClasses = 7;
  aps::models::ResNet model(spec);
  const Fixture f = readFixture("tiny_bottleneck.safetensors");
  aps::models::loadState(model, f.weights, "tiny_bottleneck.safetensors");
  model.eval();
  aps::autograd::NoGradGuard noGrad;
  EXPECT_LT(maxRelativeError(model.forward(f.extra.at("input")), f.extra.at("output")), kTolerance);
}

}  // namespace
