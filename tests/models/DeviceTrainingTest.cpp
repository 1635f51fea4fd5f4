// A model trains on the GPU through the same front ends, autograd and optimizers as on the
// CPU (label cuda: a GPU, or the emulated device of APS_CUDA_EMULATION, where every kernel is
// the CPU's arithmetic and the result must be the CPU's bits). Skips without a device.
#include "framework/autograd/Engine.h"
#include "framework/ops/Loss.h"
#include "framework/optim/AdamW.h"
#include "framework/optim/Lars.h"
#include "framework/optim/Sgd.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "models/ModelRegistry.h"
#include "tests/common/ErrorMessage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using aps::Device;
using aps::Tensor;

#define REQUIRE_GPU() \
  if (aps::cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device"

#if defined(APS_CUDA_EMULATION)
constexpr bool kEmulated = true;  // the CPU's arithmetic: bit for bit
#else
constexpr bool kEmulated = false;  // cuDNN/cuBLAS/expf: within tolerance
#endif

struct Steps {
  std::vector<float> losses;
  aps::NamedTensors state;  // on the CPU
};

std::unique_ptr<aps::optim::Optimizer> makeOptimizer(const std::string& kind, aps::NamedTensors params) {
  if (kind == "sgd") {
    return std::make_unique<aps::optim::Sgd>(
        params, aps::optim::SgdOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true, .weightDecay = 5e-4});
  }
  if (kind == "lars") return std::make_unique<aps::optim::Lars>(params, aps::optim::LarsOptions{.lr = 0.1});
  return std::make_unique<aps::optim::AdamW>(params, aps::optim::AdamWOptions{.lr = 1e-3});
}

// `steps` training steps of `model` on a fixed batch on `device`: the model is built on the
// CPU with a fixed seed and moved (Module::to), as aps_train does.
Steps train(const std::string& model, const std::string& optimizer, Device device, int steps) {
  aps::Rng rng(7);
  const int64_t channels = model == "fcn_resnet20" ? 3 : 1;
  const Tensor x = Tensor::randn({4, channels, 16, 16}, rng).to(device);
  Tensor y;
  if (model == "fcn_resnet20") {
    std::vector<int64_t> labels(4 * 16 * 16);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7) % 5);
    y = Tensor::fromVector(labels, {4, 16, 16}).to(device);
  } else {
    y = Tensor::fromVector(std::vector<int64_t>{0, 1, 2, 3}, {4}).to(device);
  }
  auto net = aps::models::createModel(model, {.numClasses = 5, .inChannels = channels, .seed = 3});
  net->to(device);
  auto opt = makeOptimizer(optimizer, net->namedParameters());
  net->train();
  Steps run;
  for (int i = 0; i < steps; ++i) {
    opt->zeroGrad();
    const Tensor loss = aps::ops::crossEntropy(net->forward(x), y);
    EXPECT_EQ(loss.device(), device);
    aps::autograd::backward(loss);
    opt->step();
    run.losses.push_back(loss.item());
  }
  for (const auto& p : net->namedParameters()) {
    EXPECT_EQ(p.tensor.device(), device) << p.name;
    EXPECT_TRUE(p.tensor.grad().defined()) << p.name;
  }
  for (const auto& entry : net->stateDict()) run.state.push_back({entry.name, entry.tensor.to(Device::cpu())});
  return run;
}

void expectSame(const Steps& cpu, const Steps& gpu, const std::string& what) {
  ASSERT_EQ(cpu.losses.size(), gpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    if (kEmulated) {
      EXPECT_EQ(std::memcmp(&cpu.losses[i], &gpu.losses[i], 4), 0)
          << what << " step " << i << ": " << cpu.losses[i] << " vs " << gpu.losses[i];
    } else {
      EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-3 * std::abs(cpu.losses[i])) << what << " step " << i;
    }
  }
  ASSERT_EQ(cpu.state.size(), gpu.state.size());
  for (size_t k = 0; k < cpu.state.size(); ++k) {
    const Tensor& a = cpu.state[k].tensor;
    const Tensor& b = gpu.state[k].tensor;
    ASSERT_EQ(a.sizes(), b.sizes()) << cpu.state[k].name;
    if (a.dtype() != aps::DType::Float32) continue;
    const std::vector<float> va = a.toFloatVector(), vb = b.toFloatVector();
    if (kEmulated) {
      EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * 4), 0) << what << ": " << cpu.state[k].name;
    } else {
      for (size_t i = 0; i < va.size(); ++i) {
        ASSERT_NEAR(vb[i], va[i], 1e-2 + 1e-2 * std::abs(va[i])) << what << ": " << cpu.state[k].name << "[" << i << "]";
      }
    }
  }
}

TEST(DeviceTraining, ResNet20StepsOnTheGpuAreTheCpuSteps) {
  REQUIRE_GPU();
  for (const std::string optimizer : {"sgd", "lars", "adamw"}) {
    const Steps cpu = train("resnet20", optimizer, Device::cpu(), 3);
    const Steps gpu = train("resnet20", optimizer, Device::cuda(), 3);
    expectSame(cpu, gpu, "resnet20/" + optimizer);
  }
}

// The segmentation network: dilated convolutions, bilinear upsampling, per-pixel loss.
TEST(DeviceTraining, FcnStepsOnTheGpuAreTheCpuSteps) {
  REQUIRE_GPU();
  expectSame(train("fcn_resnet20", "sgd", Device::cpu(), 2), train("fcn_resnet20", "sgd", Device::cuda(), 2),
             "fcn_resnet20");
}

// The small CNN without batch norm (max pooling, dropout-free linear head).
TEST(DeviceTraining, ConvNetStepsOnTheGpuAreTheCpuSteps) {
  REQUIRE_GPU();
  expectSame(train("convnet", "sgd", Device::cpu(), 3), train("convnet", "sgd", Device::cuda(), 3), "convnet");
}

TEST(DeviceTraining, InputsOnTwoDevicesAreAnErrorNamingTheOpAndBoth) {
  REQUIRE_GPU();
  auto net = aps::models::createModel("resnet20", {.numClasses = 5, .inChannels = 1, .seed = 3});
  net->to(Device::cuda());
  aps::Rng rng(1);
  const Tensor x = Tensor::randn({2, 1, 16, 16}, rng);  // left on the CPU
  const std::string error = aps::testsupport::errorOf([&] { net->forward(x); });
  EXPECT_THAT(error, ::testing::HasSubstr("conv2d: inputs on two devices, cpu and cuda"));
}

}  // namespace
