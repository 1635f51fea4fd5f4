#include "framework/core/Error.h"
#include "models/ModelRegistry.h"

#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <string>

namespace {

using aps::models::createModel;

TEST(ModelRegistry, KnowsEveryFamily) {
  const auto names = aps::models::modelNames();
  for (const char* name :
       {"resnet20", "resnet32", "resnet44", "resnet56", "resnet110", "resnet18_cifar", "resnet18", "resnet34",
        "resnet50", "resnet101", "resnet152", "fcn_resnet18_d8", "fcn_resnet50_d8", "fcn_resnet20"}) {
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

}  // namespace
