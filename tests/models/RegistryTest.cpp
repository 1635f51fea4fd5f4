#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "framework/ops/Elementwise.h"
#include "framework/ops/Linear.h"
#include "models/Mlp.h"
#include "models/ModelRegistry.h"

#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using aps::models::createModel;

TEST(ModelRegistry, KnowsEveryFamily) {
  const auto names = aps::models::modelNames();
  for (const char* name :
       {"resnet20", "resnet32", "resnet44", "resnet56", "resnet110", "resnet18_cifar", "resnet18", "resnet34",
        "resnet50", "resnet101", "resnet152", "fcn_resnet18_d8", "fcn_resnet50_d8", "fcn_resnet20", "convnet", "mlp"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  EXPECT_TRUE(aps::models::modelInfo("fcn_resnet20").segmentation);
  EXPECT_FALSE(aps::models::modelInfo("resnet20").segmentation);
}

TEST(ModelRegistry, UnknownNameListsTheKnownOnes) {
  try {
    createModel("resnet21");
    FAIL() << "expected aps::Error";
  } catch (const aps::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'resnet21'"), std::string::npos) << message;
    EXPECT_NE(message.find("resnet20, resnet32"), std::string::npos) << message;
    EXPECT_NE(message.find("fcn_resnet50_d8"), std::string::npos) << message;
  }
}

TEST(ModelRegistry, AppliesOptionsAndDefaults) {
  auto model = createModel("resnet20", {.numClasses = 7, .inChannels = 1});
  const auto params = model->namedParameters();
  EXPECT_EQ(params.front().tensor.sizes(), (aps::Shape{16, 1, 3, 3}));
  EXPECT_EQ(params.back().name, "fc.bias");
  EXPECT_EQ(params.back().tensor.sizes(), (aps::Shape{7}));
  EXPECT_EQ(createModel("resnet56")->namedParameters().back().tensor.sizes(), (aps::Shape{10}));
  EXPECT_EQ(aps::models::modelInfo("resnet18").defaultNumClasses, 1000);
  EXPECT_EQ(createModel("fcn_resnet20")->namedParameters().back().tensor.sizes(), (aps::Shape{19}));
}

TEST(ModelRegistry, RejectsBadOptions) {
  EXPECT_ERROR_NAMES(createModel("resnet20", {.numClasses = -1}), "num_classes");
  EXPECT_ERROR_NAMES(createModel("resnet20", {.numClasses = 10, .inChannels = 0}), "in_channels");
}

// Dettmers' MNIST network by default: fc1 784 -> 1200, fc2 1200 -> 1200, fc3 1200 -> classes,
// and its forward is linear-ReLU-linear-ReLU-linear on the flattened input.
TEST(ModelRegistry, MlpIsTheFlattenedInputThroughItsWidths) {
  const auto dettmers = createModel("mlp", {.numClasses = 10, .inChannels = 1});
  const auto params = dettmers->namedParameters();
  ASSERT_EQ(params.size(), 6u);
  EXPECT_EQ(params[0].name, "fc1.weight");
  EXPECT_EQ(params[0].tensor.sizes(), (aps::Shape{1200, 784}));
  EXPECT_EQ(params[4].name, "fc3.weight");
  EXPECT_EQ(params[4].tensor.sizes(), (aps::Shape{10, 1200}));
  int64_t total = 0;
  for (const auto& p : params) total += p.tensor.numel();
  EXPECT_EQ(total, 784 * 1200 + 1200 + 1200 * 1200 + 1200 + 1200 * 10 + 10);

  const auto small = createModel("mlp", {.numClasses = 3, .inChannels = 2, .seed = 5, .widths = {8, 5}});
  const auto p = small->namedParameters();
  aps::Rng rng(9);
  std::vector<float> values(2 * 2 * 2 * 2);
  for (float& v : values) v = rng.normal();
  const aps::Tensor x = aps::Tensor::fromVector(std::span<const float>(values), {2, 2, 2, 2});
  const aps::Tensor flat = aps::Tensor::fromVector(std::span<const float>(values), {2, 8});
  const aps::Tensor expected = aps::ops::linear(
      aps::ops::relu(aps::ops::linear(flat, p[0].tensor, p[1].tensor)), p[2].tensor, p[3].tensor);
  const aps::Tensor got = small->forward(x);
  ASSERT_EQ(got.sizes(), (aps::Shape{2, 3}));
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_EQ(got.data<float>()[i], expected.data<float>()[i]) << i;

  // An input of another size, or a width of 0, names model.widths.
  EXPECT_ERROR_NAMES(small->forward(aps::Tensor::zeros({2, 3, 2, 2})), "12 features per sample where model.widths[0] = 8");
  EXPECT_ERROR_NAMES(createModel("mlp", {.widths = {784, 0}}), "model.widths holds 0");
}

}  // namespace
