// The full-size torchvision architectures (11M to 60M parameters each): slow to build because
// every weight is drawn from the RNG, so they live in the 'slow' binary.
#include "framework/autograd/GradMode.h"
#include "models/Fcn.h"
#include "models/ModelRegistry.h"
#include "models/ResNet.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

using aps::Tensor;
using aps::models::createModel;
using aps::models::ModelOptions;

int64_t countOf(const std::string& name, ModelOptions options = {}) {
  int64_t total = 0;
  for (const auto& p : createModel(name, options)->namedParameters()) total += p.tensor.numel();
  return total;
}

std::vector<std::string> keysOf(const std::string& name) {
  std::vector<std::string> out;
  for (const auto& t : createModel(name)->stateDict()) out.push_back(t.name);
  return out;
}

TEST(TorchvisionSizes, CifarResNet18MatchesTheArtifact) {
  // torchvision resnet18 - 7x7 stem (9408) + 3x3 stem (1728) - fc 1000 + fc 10.
  EXPECT_EQ(countOf("resnet18_cifar"), 11173962);
  aps::autograd::NoGradGuard noGrad;
  auto model = createModel("resnet18_cifar");
  model->eval();
  EXPECT_EQ(model->forward(Tensor::zeros({1, 3, 32, 32})).sizes(), (aps::Shape{1, 10}));
}

TEST(TorchvisionSizes, ResNetParameterCounts) {
  EXPECT_EQ(countOf("resnet18"), 11689512);
  EXPECT_EQ(countOf("resnet34"), 21797672);
  EXPECT_EQ(countOf("resnet50"), 25557032);
  EXPECT_EQ(countOf("resnet101"), 44549160);
  EXPECT_EQ(countOf("resnet152"), 60192808);
}

TEST(TorchvisionSizes, FcnParameterCounts) {
  // torchvision fcn_resnet50(num_classes=21, aux_loss=False) has 32,957,013 parameters.
  EXPECT_EQ(countOf("fcn_resnet50_d8", {.numClasses = 21}), 32957013);
  EXPECT_EQ(countOf("fcn_resnet50_d8"), 32955987);  // 19 Cityscapes classes
  EXPECT_EQ(countOf("fcn_resnet18_d8"), 11769043);
  EXPECT_EQ(countOf("fcn_resnet20"), 281395);
}

TEST(TorchvisionSizes, StateDictKeys) {
  const auto r18 = keysOf("resnet18");
  EXPECT_EQ(r18.size(), 122u);  // len(torchvision.models.resnet18().state_dict())
  EXPECT_EQ(r18[6], "layer1.0.conv1.weight");
  EXPECT_NE(std::find(r18.begin(), r18.end(), "layer4.0.downsample.1.running_var"), r18.end());
  EXPECT_EQ(std::find(r18.begin(), r18.end(), "layer1.0.downsample.0.weight"), r18.end());
  const auto r50 = keysOf("resnet50");
  EXPECT_EQ(r50.size(), 320u);  // len(torchvision.models.resnet50().state_dict())
  EXPECT_NE(std::find(r50.begin(), r50.end(), "layer4.2.conv3.weight"), r50.end());
  // Bottlenecks widen layer1 (64 -> 256), so even its first block has a projection.
  EXPECT_NE(std::find(r50.begin(), r50.end(), "layer1.0.downsample.0.weight"), r50.end());
  const auto fcn = keysOf("fcn_resnet50_d8");
  EXPECT_EQ(fcn.front(), "backbone.conv1.weight");
  EXPECT_EQ(fcn[fcn.size() - 2], "classifier.4.weight");
}

TEST(TorchvisionSizes, D8BackbonesKeepOneEighthOfTheInput) {
  aps::autograd::NoGradGuard noGrad;
  auto fcn = createModel("fcn_resnet18_d8", {.numClasses = 3});
  fcn->eval();
  EXPECT_EQ(dynamic_cast<aps::models::Fcn&>(*fcn).backbone().outputStride(), 8);
  EXPECT_EQ(fcn->forward(Tensor::zeros({1, 3, 50, 42})).sizes(), (aps::Shape{1, 3, 50, 42}));
  EXPECT_EQ(aps::models::ResNet(aps::models::ResNetSpec::imagenet(50)).outputStride(), 32);
}

}  // namespace
