// Architecture tests: parameter counts against torchvision / the PyTorch mirror in
// tools/fixtures/make_model_fixtures.py (--counts), torchvision's names and state_dict order,
// and output shapes.
#include "framework/autograd/GradMode.h"
#include "framework/core/Error.h"
#include "models/Fcn.h"
#include "models/ModelRegistry.h"
#include "models/ResNet.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace {

using aps::Tensor;
using aps::models::createModel;
using aps::models::ModelOptions;

int64_t parameterCount(const aps::nn::Module& model) {
  int64_t total = 0;
  for (const auto& p : model.namedParameters()) total += p.tensor.numel();
  return total;
}

int64_t countOf(const std::string& name, ModelOptions options = {}) {
  return parameterCount(*createModel(name, options));
}

std::vector<std::string> names(const aps::NamedTensors& tensors) {
  std::vector<std::string> out;
  for (const auto& t : tensors) out.push_back(t.name);
  return out;
}

TEST(ResNetCounts, CifarResNetsWithProjectionShortcuts) {
  // Option A (zero padding) ResNet-20 has 269,722 parameters (He et al. 2016: 0.27M); option B
  // adds the two 1x1 projections with their BN: 512 + 64 + 2048 + 128.
  EXPECT_EQ(countOf("resnet20"), 272474);
  EXPECT_EQ(countOf("resnet32"), 466906);
  EXPECT_EQ(countOf("resnet44"), 661338);
  EXPECT_EQ(countOf("resnet56"), 855770);
  EXPECT_EQ(countOf("resnet110"), 1730714);
  // Fashion-MNIST: one input channel removes 16 * 9 stem weights.
  EXPECT_EQ(countOf("resnet20", {.numClasses = 10, .inChannels = 1}), 272186);
}

TEST(ResNetNames, BatchNormBuffers) {
  auto model = createModel("resnet20");
  const auto buffers = model->namedBuffers();
  ASSERT_EQ(buffers.size(), 3u * 21u);  // 19 BN in the blocks + stem + 2 projections = 21
  EXPECT_EQ(buffers[0].name, "bn1.running_mean");
  EXPECT_EQ(buffers[2].name, "bn1.num_batches_tracked");
  EXPECT_EQ(buffers[2].tensor.dtype(), aps::DType::Int64);
}

TEST(ResNetNames, TorchvisionStateDictOrder) {
  // resnet20 uses torchvision's module names too (downsample, fc), so its checkpoint layout
  // reads like any torchvision ResNet's.
  const std::vector<std::string> keys = names(createModel("resnet20")->stateDict());
  ASSERT_EQ(keys.size(), 21u * 6u - 21u + 19u + 2u + 2u);  // 21 BN x 5, 21 conv weights, fc
  const std::vector<std::string> head = {"conv1.weight",
                                         "bn1.weight",
                                         "bn1.bias",
                                         "bn1.running_mean",
                                         "bn1.running_var",
                                         "bn1.num_batches_tracked",
                                         "layer1.0.conv1.weight",
                                         "layer1.0.bn1.weight",
                                         "layer1.0.bn1.bias",
                                         "layer1.0.bn1.running_mean",
                                         "layer1.0.bn1.running_var",
                                         "layer1.0.bn1.num_batches_tracked",
                                         "layer1.0.conv2.weight"};
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(head.size())), head);
  EXPECT_EQ(keys[keys.size() - 2], "fc.weight");
  EXPECT_EQ(keys.back(), "fc.bias");
  // The projection shortcut sits after bn2 in the first block of layer2.
  const auto it = std::find(keys.begin(), keys.end(), "layer2.0.bn2.num_batches_tracked");
  ASSERT_NE(it, keys.end());
  EXPECT_EQ(*(it + 1), "layer2.0.downsample.0.weight");
  EXPECT_EQ(*(it + 2), "layer2.0.downsample.1.weight");
  EXPECT_EQ(*(it + 7), "layer2.1.conv1.weight");
  EXPECT_EQ(std::find(keys.begin(), keys.end(), "layer1.0.downsample.0.weight"), keys.end());
}

TEST(ResNetNames, FcnUsesTorchvisionNames) {
  const auto keys = names(createModel("fcn_resnet20")->stateDict());
  EXPECT_EQ(keys.front(), "backbone.conv1.weight");
  EXPECT_EQ(std::find(keys.begin(), keys.end(), "backbone.fc.weight"), keys.end());
  const std::vector<std::string> tail = {"classifier.0.weight",      "classifier.1.weight",
                                         "classifier.1.bias",        "classifier.1.running_mean",
                                         "classifier.1.running_var", "classifier.1.num_batches_tracked",
                                         "classifier.4.weight",      "classifier.4.bias"};
  EXPECT_EQ(std::vector<std::string>(keys.end() - static_cast<std::ptrdiff_t>(tail.size()), keys.end()), tail);
}

TEST(ResNetShapes, ClassifierOutputs) {
  aps::autograd::NoGradGuard noGrad;
  auto fashion = createModel("resnet20", {.numClasses = 10, .inChannels = 1});
  fashion->eval();
  EXPECT_EQ(fashion->forward(Tensor::zeros({2, 1, 28, 28})).sizes(), (aps::Shape{2, 10}));
  auto cifar = createModel("resnet32", {.numClasses = 100});
  cifar->eval();
  EXPECT_EQ(cifar->forward(Tensor::zeros({1, 3, 32, 32})).sizes(), (aps::Shape{1, 100}));
  EXPECT_THROW(cifar->forward(Tensor::zeros({1, 1, 32, 32})), aps::Error);
}

TEST(ResNetShapes, DilationKeepsTheResolution) {
  using aps::models::ResNet;
  using aps::models::ResNetSpec;
  EXPECT_EQ(ResNet(ResNetSpec::cifar(20)).outputStride(), 4);
  // A narrow ImageNet-stem network: stride 4 from the stem, x2 at stage 2, dilated stages 3-4.
  ResNetSpec spec = ResNetSpec::imagenet(18);
  spec.stemWidth = 8;
  spec.widths = {8, 8, 8, 8};
  spec.blocks = {1, 1, 2, 2};
  spec.numClasses = 0;
  spec.dilate = {false, false, true, true};
  ResNet backbone(spec);
  EXPECT_EQ(backbone.outputStride(), 8);
  aps::autograd::NoGradGuard noGrad;
  backbone.eval();
  EXPECT_EQ(backbone.forward(Tensor::zeros({1, 3, 64, 48})).sizes(), (aps::Shape{1, 8, 8, 6}));
  spec.dilate.clear();
  EXPECT_EQ(ResNet(spec).outputStride(), 32);
  spec.dilate = {true, false, false, false};
  EXPECT_THROW(ResNet{spec}, aps::Error);
}

TEST(ResNetShapes, FcnPredictsAtTheInputResolution) {
  aps::autograd::NoGradGuard noGrad;
  auto fcn = createModel("fcn_resnet20", {.numClasses = 5});
  fcn->eval();
  EXPECT_EQ(fcn->forward(Tensor::zeros({2, 3, 64, 64})).sizes(), (aps::Shape{2, 5, 64, 64}));
  EXPECT_EQ(fcn->forward(Tensor::zeros({1, 3, 30, 22})).sizes(), (aps::Shape{1, 5, 30, 22}));
  EXPECT_EQ(dynamic_cast<aps::models::Fcn&>(*fcn).backbone().outputStride(), 2);
}

TEST(ResNetSpecs, RejectBadDepths) {
  EXPECT_THROW(aps::models::ResNetSpec::cifar(21), aps::Error);
  EXPECT_THROW(aps::models::ResNetSpec::imagenet(19), aps::Error);
}

TEST(ResNetInit, SeedsAreReproducibleAndDistinct) {
  auto a = createModel("resnet20", {.seed = 7});
  auto b = createModel("resnet20", {.seed = 7});
  auto c = createModel("resnet20", {.seed = 8});
  const auto wa = a->namedParameters()[0].tensor.toFloatVector();
  EXPECT_EQ(wa, b->namedParameters()[0].tensor.toFloatVector());
  EXPECT_NE(wa, c->namedParameters()[0].tensor.toFloatVector());
  // Kaiming normal, fan_out = 16 * 9: the weights' standard deviation is sqrt(2 / 144).
  double sumSq = 0.0;
  for (float w : wa) sumSq += static_cast<double>(w) * w;
  EXPECT_NEAR(std::sqrt(sumSq / static_cast<double>(wa.size())), std::sqrt(2.0 / 144.0), 0.02);
}

}  // namespace
