// The command-line tools aps_model and aps_forward, run as a user runs them.
#include "framework/autograd/GradMode.h"
#include "framework/io/Safetensors.h"
#include "models/ModelRegistry.h"
#include "models/Weights.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

namespace {

using aps::Tensor;

struct ToolRun {
  int status = -1;
  std::string output;  // stdout and stderr
};

ToolRun run(const std::string& command) {
  ToolRun result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

class ToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("aps_tools_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

TEST_F(ToolsTest, ApsModelPrintsTheParameterTable) {
  const ToolRun r = run(std::string(APS_MODEL_TOOL) + " --model resnet20 --in-channels 1 --num-classes 10");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("conv1.weight"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[16, 1, 3, 3]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("layer3.2.conv2.weight"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("total: 272,186 parameters"), std::string::npos) << r.output;
}

TEST_F(ToolsTest, ApsModelRejectsUnknownNames) {
  const ToolRun r = run(std::string(APS_MODEL_TOOL) + " --model resnet19");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("unknown model 'resnet19'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fcn_resnet20"), std::string::npos) << r.output;
}

TEST_F(ToolsTest, ApsForwardMatchesTheLibrary) {
  auto model = aps::models::createModel("resnet20", {.numClasses = 10, .inChannels = 1, .seed = 4});
  aps::Rng rng(9);
  const Tensor x = Tensor::randn({3, 1, 28, 28}, rng);
  model->train();
  model->forward(Tensor::randn({4, 1, 28, 28}, rng));  // non-trivial running statistics
  aps::models::saveWeights(*model, path("w.safetensors"));
  aps::io::saveSafetensors(path("x.safetensors"), {{"input", x}});

  const ToolRun r =
      run(std::string(APS_FORWARD_TOOL) + " --model resnet20 --in-channels 1 --weights " + path("w.safetensors") +
          " --input " + path("x.safetensors") + " --output " + path("y.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto written = aps::io::loadSafetensors(path("y.safetensors"));
  ASSERT_EQ(written.tensors.size(), 1u);
  EXPECT_EQ(written.tensors[0].name, "output");

  model->eval();
  aps::autograd::NoGradGuard noGrad;
  const Tensor expected = model->forward(x);
  const Tensor& actual = written.tensors[0].tensor;
  ASSERT_EQ(actual.sizes(), expected.sizes());
  EXPECT_EQ(actual.toFloatVector(), expected.toFloatVector());  // same code, same bits
}

TEST_F(ToolsTest, ApsForwardNamesWhatIsWrong) {
  auto model = aps::models::createModel("resnet20");
  aps::models::saveWeights(*model, path("w.safetensors"));
  aps::io::saveSafetensors(path("x.safetensors"), {{"image", Tensor::zeros({1, 3, 32, 32})}});
  const std::string base = std::string(APS_FORWARD_TOOL) + " --weights " + path("w.safetensors") + " --input " +
                           path("x.safetensors") + " --output " + path("y.safetensors");
  const ToolRun noInput = run(base + " --model resnet20");
  EXPECT_EQ(noInput.status, 1);
  EXPECT_NE(noInput.output.find("no tensor named 'input'"), std::string::npos) << noInput.output;
  const ToolRun wrongModel = run(base + " --model resnet32");
  EXPECT_EQ(wrongModel.status, 1);
  EXPECT_NE(wrongModel.output.find("missing keys"), std::string::npos) << wrongModel.output;
  EXPECT_FALSE(std::filesystem::exists(path("y.safetensors")));
}

}  // namespace
