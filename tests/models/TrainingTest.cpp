// The models learn: a few SGD steps on one small fixed batch drive the loss down (the
// gradients reach every parameter with the right sign), for a classifier and an FCN.
#include "framework/autograd/Engine.h"
#include "framework/ops/Loss.h"
#include "framework/optim/Sgd.h"
#include "framework/tensor/CpuAllocator.h"
#include "models/ModelRegistry.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using aps::Tensor;

// Returns the losses of `steps` training steps on a fixed random batch.
std::vector<float> trainOnOneBatch(const std::string& name, const Tensor& x, const Tensor& y, int64_t classes,
                                   int steps, double lr) {
  auto model = aps::models::createModel(name, {.numClasses = classes, .inChannels = x.size(1), .seed = 1});
  aps::optim::Sgd sgd(model->namedParameters(), {.lr = lr, .momentum = 0.9});
  model->train();
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    sgd.zeroGrad();
    const Tensor loss = aps::ops::crossEntropy(model->forward(x), y);
    aps::autograd::backward(loss);
    sgd.step();
    losses.push_back(loss.item());
  }
  // Every parameter received a gradient.
  for (const auto& p : model->namedParameters()) EXPECT_TRUE(p.tensor.grad().defined()) << name << " " << p.name;
  return losses;
}

TEST(ModelTraining, ResNet20FitsASmallBatch) {
  aps::Rng rng(3);
  const Tensor x = Tensor::randn({8, 1, 12, 12}, rng);
  const Tensor y = Tensor::fromVector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
  const auto losses = trainOnOneBatch("resnet20", x, y, 8, 12, 0.05);
  EXPECT_LT(losses.back(), 0.5f * losses.front()) << losses.front() << " -> " << losses.back();
}

// Once a step has run, the next steps take all their tensor memory (activations, gradients,
// workspaces) from the allocator's caches: none from the C allocator.
TEST(ModelTraining, WarmStepsTakeNoFreshTensorMemory) {
  aps::Rng rng(5);
  for (int64_t batch : {int64_t{1}, int64_t{8}}) {
    const Tensor x = Tensor::randn({batch, 1, 28, 28}, rng);
    std::vector<int64_t> labels(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = i % 10;
    const Tensor y = Tensor::fromVector(labels, {batch});
    auto model = aps::models::createModel("resnet20", {.numClasses = 10, .inChannels = 1, .seed = 1});
    aps::optim::Sgd sgd(model->namedParameters(), {.lr = 0.01, .momentum = 0.9});
    model->train();
    const auto step = [&] {
      sgd.zeroGrad();
      const Tensor loss = aps::ops::crossEntropy(model->forward(x), y);
      aps::autograd::backward(loss);
      sgd.step();
    };
    for (int i = 0; i < 2; ++i) step();
    const uint64_t before = aps::CpuAllocator::instance().freshAllocations();
    for (int i = 0; i < 3; ++i) step();
    EXPECT_EQ(aps::CpuAllocator::instance().freshAllocations(), before) << "batch " << batch;
  }
}

TEST(ModelTraining, FcnResNet20FitsASmallBatch) {
  aps::Rng rng(4);
  const Tensor x = Tensor::randn({2, 3, 16, 16}, rng);
  // Left half class 0, right half class 1: learnable from position-dependent padding cues
  // and the image content at once.
  std::vector<int64_t> labels(2 * 16 * 16);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = (i % 16) < 8 ? 0 : 1;
  const Tensor y = Tensor::fromVector(labels, {2, 16, 16});
  const auto losses = trainOnOneBatch("fcn_resnet20", x, y, 2, 12, 0.05);
  EXPECT_LT(losses.back(), 0.5f * losses.front()) << losses.front() << " -> " << losses.back();
}

}  // namespace
