// End to end: a small conv net (conv, batch norm, ReLU, pooling, linear) learns a synthetic
// 4-class image problem in fp32 and in every 16-bit compute precision, with dynamic loss
// scaling, and the pure modes keep every parameter, gradient and optimizer-state value a
// value of the format after every step.
#include "framework/autograd/ComputePrecision.h"
#include "framework/autograd/Engine.h"
#include "framework/autograd/GradMode.h"
#include "framework/core/Rng.h"
#include "framework/nn/BatchNorm2d.h"
#include "framework/nn/Conv2d.h"
#include "framework/nn/Flatten.h"
#include "framework/nn/Linear.h"
#include "framework/nn/MaxPool2d.h"
#include "framework/nn/ReLU.h"
#include "framework/nn/Sequential.h"
#include "framework/ops/Loss.h"
#include "framework/ops/Reduction.h"
#include "framework/optim/Sgd.h"
#include "precision/DynamicLossScaler.h"
#include "framework/numerics/FormatRounding.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace {

using aps::NamedTensors;
using aps::Rng;
using aps::Tensor;
namespace ag = aps::autograd;
namespace nn = aps::nn;
namespace ops = aps::ops;
namespace optim = aps::optim;

constexpr int64_t kClasses = 4, kSide = 8, kBatch = 32, kSteps = 120;

// Class c: a fixed random 8x8 template, shifted by up to one pixel, plus noise.
struct Dataset {
  Tensor images;  // (n, 1, 8, 8)
  Tensor labels;  // (n) int64
};

Dataset makeDataset(int64_t n, uint64_t seed) {
  Rng templateRng(100);
  const Tensor templates = Tensor::randn({kClasses, kSide, kSide}, templateRng);
  Rng rng(seed);
  Dataset d{Tensor::empty({n, 1, kSide, kSide}), Tensor::zeros({n}, aps::DType::Int64)};
  const float* t = templates.data<float>();
  float* img = d.images.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const auto c = static_cast<int64_t>(rng.below(kClasses));
    const int64_t dy = static_cast<int64_t>(rng.below(3)) - 1, dx = static_cast<int64_t>(rng.below(3)) - 1;
    d.labels.data<int64_t>()[i] = c;
    for (int64_t y = 0; y < kSide; ++y) {
      for (int64_t x = 0; x < kSide; ++x) {
        const int64_t sy = (y + dy + kSide) % kSide, sx = (x + dx + kSide) % kSide;
        img[(i * kSide + y) * kSide + x] = t[(c * kSide + sy) * kSide + sx] + rng.normal(0.0f, 1.0f);
      }
    }
  }
  return d;
}

std::shared_ptr<nn::Sequential> makeModel() {
  Rng rng(1);
  auto model = std::make_shared<nn::Sequential>();
  model->add(
      std::make_shared<nn::Conv2d>(nn::Conv2dSpec{.in = 1, .out = 8, .kernel = 3, .padding = 1, .bias = false}, rng));
  model->add(std::make_shared<nn::BatchNorm2d>(8));
  model->add(std::make_shared<nn::ReLU>());
  model->add(std::make_shared<nn::MaxPool2d>(ops::Pool2dOptions{.kernelH = 2, .kernelW = 2}));
  model->add(std::make_shared<nn::Flatten>());
  model->add(std::make_shared<nn::Linear>(8 * 4 * 4, kClasses, rng));
  return model;
}

struct Result {
  double firstLoss = 0, lastLoss = 0, accuracy = 0;
  int64_t notRepresentable = 0;  // parameter, gradient and state values off the format (pure)
  int64_t skippedSteps = 0;
  float finalScale = 0;
};

Result train(const std::string& mode, bool stochastic = false, double initialScale = 65536.0) {
  const ag::ComputePrecision precision = ag::ComputePrecision::parse(mode);
  const Dataset trainSet = makeDataset(kBatch * 16, 2), testSet = makeDataset(512, 3);
  auto model = makeModel();
  NamedTensors params = model->namedParameters();
  optim::Sgd sgd(params, {.lr = 0.05, .momentum = 0.9});
  if (precision.isPure()) sgd.setStorageFormat(precision.format(), stochastic, 17);
  aps::precision::DynamicLossScaler scaler({.initialScale = initialScale});
  const aps::precision::ComputeFormat f = precision.parameterFormat();
  auto offFormat = [&](const Tensor& t) {
    return t.dtype() == aps::DType::Float32 ? aps::precision::countNotRepresentable(t, f) : 0;
  };

  Result r;
  for (int64_t step = 0; step < kSteps; ++step) {
    const int64_t first = (step % 16) * kBatch;
    const Tensor x = trainSet.images.narrow(0, first, kBatch).contiguous();
    const Tensor y = trainSet.labels.narrow(0, first, kBatch).contiguous();
    sgd.zeroGrad();
    Tensor loss;
    {
      ag::ComputePrecisionGuard guard(precision);
      loss = ops::crossEntropy(model->forward(x), y);
    }
    if (precision.isFp32()) {
      ag::backward(loss);
      sgd.step();
    } else {
      ag::backward(loss, scaler.rootGradient());
      for (const auto& p : params) r.notRepresentable += offFormat(p.tensor.grad());
      const bool finite = scaler.unscaleGradients(params, f);
      if (scaler.update(finite)) {
        aps::autograd::NoGradGuard noGrad;
        sgd.step();
      }
    }
    for (const auto& p : params) r.notRepresentable += offFormat(p.tensor) + offFormat(p.tensor.grad());
    for (const auto& s : sgd.stateDict()) r.notRepresentable += offFormat(s.tensor);
    if (step < 5) r.firstLoss += loss.item() / 5.0;
    if (step >= kSteps - 10) r.lastLoss += loss.item() / 10.0;
  }
  model->eval();
  ag::NoGradGuard noGrad;
  ag::ComputePrecisionGuard guard(precision);
  const Tensor predicted = ops::argmax(model->forward(testSet.images), 1);
  int64_t correct = 0;
  for (int64_t i = 0; i < testSet.labels.numel(); ++i)
    correct += predicted.data<int64_t>()[i] == testSet.labels.data<int64_t>()[i];
  r.accuracy = static_cast<double>(correct) / static_cast<double>(testSet.labels.numel());
  r.skippedSteps = scaler.state().skippedSteps;
  r.finalScale = scaler.scale();
  return r;
}

class ComputePrecisionTrain : public ::testing::Test {
 protected:
  static const Result& fp32() {
    static const Result result = train("fp32");
    return result;
  }
};

TEST_F(ComputePrecisionTrain, Fp32Learns) {
  EXPECT_LT(fp32().lastLoss, 0.3 * fp32().firstLoss);
  EXPECT_GT(fp32().accuracy, 0.8);
}

TEST_F(ComputePrecisionTrain, EverySixteenBitModeLearnsAsWellAsFp32) {
  for (const char* mode : {"fp16_mixed", "fp16_pure", "bf16_mixed", "bf16_pure"}) {
    const Result r = train(mode);
    SCOPED_TRACE(mode);
    EXPECT_LT(r.lastLoss, 0.3 * r.firstLoss) << "first " << r.firstLoss << " last " << r.lastLoss;
    EXPECT_GT(r.accuracy, fp32().accuracy - 0.05) << "fp32 accuracy " << fp32().accuracy;
    EXPECT_EQ(r.notRepresentable, 0);
  }
}

TEST_F(ComputePrecisionTrain, PureModesLearnWithStochasticRounding) {
  for (const char* mode : {"fp16_pure", "bf16_pure"}) {
    const Result r = train(mode, true);
    SCOPED_TRACE(mode);
    EXPECT_LT(r.lastLoss, 0.3 * r.firstLoss);
    EXPECT_GT(r.accuracy, fp32().accuracy - 0.05);
    EXPECT_EQ(r.notRepresentable, 0);
  }
}

// A scale too large for fp16 makes backward overflow: those steps are skipped and the scale
// halves until the gradients fit, and training goes on to learn.
TEST_F(ComputePrecisionTrain, LossScalerBacksOffFromOverflowAndStillLearns) {
  const Result r = train("fp16_mixed", false, 0x1p24);
  EXPECT_GT(r.skippedSteps, 0);
  EXPECT_LT(r.finalScale, 0x1p24f);
  EXPECT_LT(r.lastLoss, 0.3 * r.firstLoss);
  EXPECT_GT(r.accuracy, fp32().accuracy - 0.05);
}

}  // namespace
