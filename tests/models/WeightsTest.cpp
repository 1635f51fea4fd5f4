#include "framework/autograd/GradMode.h"
#include "framework/core/Error.h"
#include "framework/io/Safetensors.h"
#include "models/ModelRegistry.h"
#include "models/Weights.h"
#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

namespace {

using aps::Tensor;
using aps::models::createModel;

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("aps_weights_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

bool sameBits(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.rawData(), cb.rawData(), ca.buffer().bytes()) == 0;
}

using aps::testsupport::errorOf;

TEST_F(WeightsTest, RoundTripIsBitExact) {
  auto source = createModel("fcn_resnet20", {.numClasses = 4, .seed = 1});
  {
    // Non-trivial running statistics and batch counters.
    aps::Rng rng(5);
    source->train();
    source->forward(Tensor::randn({2, 3, 16, 16}, rng));
  }
  aps::models::saveWeights(*source, path("w.safetensors"));
  auto target = createModel("fcn_resnet20", {.numClasses = 4, .seed = 2});
  aps::models::loadWeights(*target, path("w.safetensors"));
  const auto expected = source->stateDict();
  const auto actual = target->stateDict();
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(expected[i].name, actual[i].name);
    EXPECT_TRUE(sameBits(expected[i].tensor, actual[i].tensor)) << expected[i].name;
  }
  // The file keeps torch's state_dict order and dtypes (num_batches_tracked is int64).
  const auto file = aps::io::loadSafetensors(path("w.safetensors"));
  ASSERT_EQ(file.tensors.size(), expected.size());
  EXPECT_EQ(file.metadata.at("format"), "pt");
  for (const auto& t : file.tensors) {
    if (t.name.ends_with("num_batches_tracked")) {
      EXPECT_EQ(t.tensor.dtype(), aps::DType::Int64);
      EXPECT_EQ(t.tensor.toVector<int64_t>()[0], 1);
    }
  }
}

TEST_F(WeightsTest, ErrorsNameMissingUnexpectedAndMisshapedKeys) {
  auto r20 = createModel("resnet20");
  aps::models::saveWeights(*r20, path("r20.safetensors"));

  auto r32 = createModel("resnet32");
  const std::string missing = errorOf([&] { aps::models::loadWeights(*r32, path("r20.safetensors")); });
  EXPECT_NE(missing.find("r20.safetensors"), std::string::npos) << missing;
  EXPECT_NE(missing.find("missing keys"), std::string::npos) << missing;
  EXPECT_NE(missing.find("layer1.3.conv1.weight"), std::string::npos) << missing;

  auto r20x100 = createModel("resnet20", {.numClasses = 100});
  const Tensor before = r20x100->namedParameters()[0].tensor.clone();
  const std::string shape = errorOf([&] { aps::models::loadWeights(*r20x100, path("r20.safetensors")); });
  EXPECT_NE(shape.find("mis-shaped keys"), std::string::npos) << shape;
  EXPECT_NE(shape.find("fc.weight (file [10, 64], model [100, 64])"), std::string::npos) << shape;
  EXPECT_NE(shape.find("fc.bias"), std::string::npos) << shape;
  EXPECT_EQ(shape.find("missing keys"), std::string::npos) << shape;
  // Nothing was copied: a failed load leaves the model as it was.
  EXPECT_TRUE(sameBits(before, r20x100->namedParameters()[0].tensor));

  auto state = r20->stateDict();
  state.push_back({"extra.weight", Tensor::zeros({3})});
  aps::io::saveSafetensors(path("extra.safetensors"), state);
  const std::string unexpected = errorOf([&] { aps::models::loadWeights(*r20, path("extra.safetensors")); });
  EXPECT_NE(unexpected.find("unexpected keys: extra.weight"), std::string::npos) << unexpected;
}

TEST_F(WeightsTest, MissingFileIsAnError) {
  auto model = createModel("resnet20");
  EXPECT_ERROR_NAMES(aps::models::loadWeights(*model, path("absent.safetensors")), "absent.safetensors");
}

}  // namespace
