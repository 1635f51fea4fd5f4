#include "framework/autograd/Engine.h"
#include "framework/autograd/Function.h"
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/nn/AdaptiveAvgPool2d.h"
#include "framework/nn/AvgPool2d.h"
#include "framework/nn/BatchNorm2d.h"
#include "framework/nn/Conv2d.h"
#include "framework/nn/Dropout.h"
#include "framework/nn/Flatten.h"
#include "framework/nn/Init.h"
#include "framework/nn/Linear.h"
#include "framework/nn/MaxPool2d.h"
#include "framework/nn/ReLU.h"
#include "framework/nn/Sequential.h"
#include "framework/ops/Elementwise.h"
#include "framework/ops/Loss.h"
#include "framework/ops/Reduction.h"
#include "tests/ops/GradCheck.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <map>

namespace {

using aps::Tensor;
namespace nn = aps::nn;

// A torchvision-style basic block, built on the public nn API as models/ will build it.
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride, aps::Rng& rng) : Module("BasicBlock") {
    conv1_ = registerModule(
        "conv1",
        std::make_shared<nn::Conv2d>(
            nn::Conv2dSpec{.in = in, .out = out, .kernel = 3, .stride = stride, .padding = 1, .bias = false}, rng));
    bn1_ = registerModule("bn1", std::make_shared<nn::BatchNorm2d>(out));
    conv2_ = registerModule("conv2",
                            std::make_shared<nn::Conv2d>(
                                nn::Conv2dSpec{.in = out, .out = out, .kernel = 3, .padding = 1, .bias = false}, rng));
    bn2_ = registerModule("bn2", std::make_shared<nn::BatchNorm2d>(out));
    if (stride != 1 || in != out) {
      downsample_ = registerModule("downsample", std::make_shared<nn::Sequential>());
      downsample_->add(std::make_shared<nn::Conv2d>(
          nn::Conv2dSpec{.in = in, .out = out, .kernel = 1, .stride = stride, .bias = false}, rng));
      downsample_->add(std::make_shared<nn::BatchNorm2d>(out));
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = aps::ops::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    return aps::ops::relu(y + (downsample_ ? downsample_->forward(x) : x));
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::Sequential> downsample_;
};

class TinyNet : public nn::Module {
 public:
  explicit TinyNet(aps::Rng& rng) : Module("TinyNet") {
    conv1_ = registerModule(
        "conv1",
        std::make_shared<nn::Conv2d>(nn::Conv2dSpec{.in = 3, .out = 4, .kernel = 3, .padding = 1, .bias = false}, rng));
    bn1_ = registerModule("bn1", std::make_shared<nn::BatchNorm2d>(4));
    layer1_ = registerModule("layer1", std::make_shared<nn::Sequential>());
    layer1_->add(std::make_shared<BasicBlock>(4, 8, 2, rng));
    layer1_->add(std::make_shared<BasicBlock>(8, 8, 1, rng));
    pool_ = registerModule("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1, 1));
    fc_ = registerModule("fc", std::make_shared<nn::Linear>(8, 5, rng));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = aps::ops::relu(bn1_->forward(conv1_->forward(x)));
    y = pool_->forward(layer1_->forward(y));
    return fc_->forward(nn::Flatten().forward(y));
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::Sequential> layer1_;
  std::shared_ptr<nn::AdaptiveAvgPool2d> pool_;
  std::shared_ptr<nn::Linear> fc_;
};

std::vector<std::string> names(const aps::NamedTensors& tensors) {
  std::vector<std::string> out;
  for (const auto& t : tensors) out.push_back(t.name);
  return out;
}

TEST(Module, TorchvisionNamesInRegistrationOrder) {
  aps::Rng rng(1);
  TinyNet net(rng);
  const auto params = names(net.namedParameters());
  const std::vector<std::string> expectedStart{"conv1.weight",
                                               "bn1.weight",
                                               "bn1.bias",
                                               "layer1.0.conv1.weight",
                                               "layer1.0.bn1.weight",
                                               "layer1.0.bn1.bias",
                                               "layer1.0.conv2.weight",
                                               "layer1.0.bn2.weight",
                                               "layer1.0.bn2.bias",
                                               "layer1.0.downsample.0.weight",
                                               "layer1.0.downsample.1.weight",
                                               "layer1.0.downsample.1.bias",
                                               "layer1.1.conv1.weight"};
  ASSERT_GE(params.size(), expectedStart.size());
  EXPECT_EQ(std::vector<std::string>(params.begin(), params.begin() + expectedStart.size()), expectedStart);
  EXPECT_EQ(params.back(), "fc.bias");
  const auto state = names(net.stateDict());
  const std::vector<std::string> stateStart{"conv1.weight",     "bn1.weight",      "bn1.bias",
                                            "bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked"};
  EXPECT_EQ(std::vector<std::string>(state.begin(), state.begin() + 6), stateStart);
  for (const auto& p : net.namedParameters()) EXPECT_TRUE(p.tensor.requiresGrad()) << p.name;
  // Same seed, same model bits.
  aps::Rng rng2(1);
  TinyNet twin(rng2);
  const auto a = net.stateDict(), b = twin.stateDict();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].tensor.toFloatVector(), b[i].tensor.toFloatVector()) << a[i].name;
}

TEST(Module, TrainEvalPropagatesAndChangesBatchNorm) {
  aps::Rng rng(2);
  TinyNet net(rng);
  Tensor x = Tensor::randn({2, 3, 8, 8}, rng);
  net.eval();
  for (auto& [name, m] : net.namedModules()) EXPECT_FALSE(m->isTraining()) << name;
  const auto before = net.stateDict();
  const auto evalOut = net.forward(x).toFloatVector();
  EXPECT_EQ(net.forward(x).toFloatVector(), evalOut);  // eval: no state change
  net.train();
  EXPECT_TRUE(net.isTraining());
  net.forward(x);
  const auto after = net.stateDict();
  EXPECT_NE(after[3].tensor.toFloatVector(), std::vector<float>(4, 0.0f));  // bn1.running_mean moved
  EXPECT_EQ(after[5].tensor.toVector<int64_t>(), std::vector<int64_t>{1});  // num_batches_tracked
}

TEST(Module, StateDictRoundTripAndStrictErrors) {
  aps::Rng rng(3), rng2(4);
  TinyNet a(rng), b(rng2);
  b.loadStateDict(a.stateDict());
  const auto sa = a.stateDict(), sb = b.stateDict();
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(sa[i].tensor.toFloatVector(), sb[i].tensor.toFloatVector());
  EXPECT_FALSE(sa[0].tensor.sharesStorage(sb[0].tensor));  // values copied, not aliased
  auto missing = a.stateDict();
  missing.pop_back();
  EXPECT_THROW(b.loadStateDict(missing), aps::Error);
  EXPECT_NO_THROW(b.loadStateDict(missing, false));
  auto extra = a.stateDict();
  extra.push_back({"bogus", Tensor::zeros({1})});
  EXPECT_THROW(b.loadStateDict(extra), aps::Error);
  auto wrongShape = a.stateDict();
  wrongShape[0].tensor = Tensor::zeros({1});
  EXPECT_THROW(b.loadStateDict(wrongShape), aps::Error);
}

TEST(Module, TrainingStepGradientsReachEveryParameter) {
  aps::Rng rng(5);
  TinyNet net(rng);
  Tensor x = Tensor::randn({4, 3, 8, 8}, rng);
  std::vector<int64_t> labels{0, 1, 2, 3};
  Tensor loss = aps::ops::crossEntropy(net.forward(x), Tensor::fromVector(labels, {4}));
  aps::autograd::backward(loss);
  for (const auto& p : net.namedParameters()) {
    ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
    EXPECT_EQ(p.tensor.grad().sizes(), p.tensor.sizes()) << p.name;
  }
  net.zeroGrad();
  for (const auto& p : net.namedParameters()) EXPECT_EQ(aps::ops::sum(p.tensor.grad()).item(), 0.0f) << p.name;
}

// One parameter whose gradient is the constant factor it is multiplied by.
class Scaled : public nn::Module {
 public:
  Scaled() : Module("Scaled") { w_ = registerParameter("w", Tensor::ones({6})); }
  Tensor forward(const Tensor& factor) { return aps::ops::sum(aps::ops::mul(w_, factor)); }

 private:
  Tensor w_;
};

std::vector<uint32_t> gradBits(nn::Module& net) {
  std::vector<uint32_t> bits;
  for (const auto& p : net.namedParameters()) {
    for (float v : p.tensor.grad().toFloatVector()) bits.push_back(std::bit_cast<uint32_t>(v));
  }
  return bits;
}

// The simulator's deferred zeroing: the gradients it leaves are the bits of zeroGrad then
// backward, a -0 gradient becoming +0 and a NaN quieted as 0 + g makes them; until backward
// they read as zeros; a parameter backward does not reach reads zeros after it.
TEST(Module, ZeroGradBeforeBackwardGivesTheBitsOfZeroGrad) {
  const float nan = std::bit_cast<float>(0x7fa00001u);  // signalling: the add quiets it
  const Tensor factor = Tensor::fromVector(std::vector<float>{-0.0f, 1.5f, nan, -2.0f, 0.0f, -3.0e-39f}, {6});
  Scaled eager, deferred, unread;
  for (Scaled* net : {&eager, &deferred, &unread}) aps::autograd::backward(net->forward(Tensor::ones({6})));
  eager.zeroGrad();
  deferred.zeroGradBeforeBackward();
  unread.zeroGradBeforeBackward();
  aps::autograd::backward(eager.forward(factor));
  aps::autograd::backward(deferred.forward(factor));
  const std::vector<uint32_t> expected = gradBits(eager);
  EXPECT_EQ(expected[0], 0u);  // 0 + (-0) = +0
  EXPECT_EQ(gradBits(deferred), expected);
  EXPECT_EQ(gradBits(unread), std::vector<uint32_t>(6, 0u));  // no backward: zeros

  // A whole network over two steps.
  aps::Rng rng(21);
  TinyNet a(rng), b(rng);
  b.loadStateDict(a.stateDict());
  Tensor x = Tensor::randn({2, 3, 8, 8}, rng);
  const Tensor y = Tensor::fromVector(std::vector<int64_t>{1, 4}, {2});
  for (int step = 0; step < 2; ++step) {
    a.zeroGrad();
    b.zeroGradBeforeBackward();
    aps::autograd::backward(aps::ops::crossEntropy(a.forward(x), y));
    aps::autograd::backward(aps::ops::crossEntropy(b.forward(x), y));
    EXPECT_EQ(gradBits(b), gradBits(a)) << "step " << step;
  }
}

// Same seed and data => same loss and gradient bits, whatever the thread count.
TEST(Module, TrainingStepIsBitIdenticalAcrossThreadCounts) {
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3}) {
    aps::setNumThreads(threads);
    aps::Rng rng(12);
    TinyNet net(rng);
    Tensor x = Tensor::randn({4, 3, 8, 8}, rng);
    std::vector<int64_t> labels{0, 1, 2, 3};
    Tensor loss = aps::ops::crossEntropy(net.forward(x), Tensor::fromVector(labels, {4}));
    aps::autograd::backward(loss);
    std::vector<float> bits{loss.item()};
    for (const auto& p : net.namedParameters()) {
      const auto g = p.tensor.grad().toFloatVector();
      bits.insert(bits.end(), g.begin(), g.end());
    }
    for (const auto& b : net.namedBuffers()) {
      const auto v = b.tensor.toFloatVector();
      bits.insert(bits.end(), v.begin(), v.end());
    }
    runs.push_back(bits);
  }
  aps::setNumThreads(2);
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

// The data-parallel attachment point: gradients as views into one flat buffer, and a
// gradient-ready hook per parameter that fires exactly once per backward, after which the
// parameter's slice of the buffer holds its final gradient.
TEST(Module, GradReadyHooksWithGradientsInAFlatBuffer) {
  aps::Rng rng(13);
  TinyNet net(rng), reference(rng);
  reference.loadStateDict(net.stateDict());
  auto params = net.namedParameters();
  int64_t total = 0;
  for (const auto& p : params) total += p.tensor.numel();
  Tensor flat = Tensor::zeros({total});
  std::map<std::string, int> calls;
  std::map<std::string, std::vector<float>> seen;
  int64_t offset = 0;
  for (auto& [name, param] : params) {
    Tensor p = param;
    p.setGrad(flat.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
    // A copy: clang 14 cannot capture a structured binding.
    aps::autograd::addGradReadyHook(p, [&calls, &seen, key = name](Tensor& leaf) {
      ++calls[key];
      seen[key] = leaf.grad().toFloatVector();
    });
  }
  Tensor x = Tensor::randn({2, 3, 8, 8}, rng);
  std::vector<int64_t> labels{1, 4};
  const Tensor y = Tensor::fromVector(labels, {2});
  for (int step = 0; step < 2; ++step) {
    net.zeroGrad();
    reference.zeroGrad(true);
    aps::autograd::backward(aps::ops::crossEntropy(net.forward(x), y));
    aps::autograd::backward(aps::ops::crossEntropy(reference.forward(x), y));
  }
  const auto refParams = reference.namedParameters();
  offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].name;
    EXPECT_EQ(calls[name], 2) << name;
    const auto expected = refParams[i].tensor.grad().toFloatVector();
    EXPECT_EQ(seen[name], expected) << name;  // final when the hook ran
    EXPECT_EQ(flat.narrow(0, offset, params[i].tensor.numel()).toFloatVector(), expected) << name;
    EXPECT_TRUE(params[i].tensor.grad().sharesStorage(flat)) << name;
    offset += params[i].tensor.numel();
  }
}

TEST(Layers, GradientsThroughModules) {
  aps::Rng rng(6);
  nn::Sequential seq;
  seq.add(std::make_shared<nn::Conv2d>(nn::Conv2dSpec{.in = 2, .out = 2, .kernel = 3, .padding = 1}, rng));
  seq.add(std::make_shared<nn::BatchNorm2d>(2));
  seq.add(std::make_shared<nn::AvgPool2d>(aps::ops::Pool2dOptions{2, 2}));
  seq.add(std::make_shared<nn::Flatten>());
  seq.add(std::make_shared<nn::Linear>(8, 2, rng));
  Tensor x = Tensor::randn({2, 2, 4, 4}, rng).setRequiresGrad();
  std::vector<Tensor> inputs{x};
  for (auto& p : seq.parameters()) inputs.push_back(p);
  aps::testing::expectGradientsMatch([&](const std::vector<Tensor>&) { return seq.forward(x); }, inputs,
                                     {1e-2, 5e-3, 5e-2});
}

TEST(Layers, DropoutIsReproducibleAndOffInEval) {
  nn::Dropout drop(0.5f, 9);
  Tensor x = Tensor::ones({100});
  const auto first = drop.forward(x).toFloatVector();
  const auto second = drop.forward(x).toFloatVector();
  EXPECT_NE(first, second);  // a new stream per call
  drop.setNextStream(0);
  EXPECT_EQ(drop.forward(x).toFloatVector(), first);
  drop.eval();
  EXPECT_EQ(drop.forward(x).toFloatVector(), x.toFloatVector());
}

TEST(Init, KaimingAndPyTorchDefaultStatistics) {
  aps::Rng rng(7);
  Tensor w = Tensor::empty({64, 32, 3, 3});
  nn::init::kaimingNormal(w, rng);  // fan_out = 64 * 9
  double sum = 0, sq = 0;
  for (float v : w.toFloatVector()) {
    sum += v;
    sq += double(v) * v;
  }
  const double n = static_cast<double>(w.numel());
  EXPECT_NEAR(sum / n, 0.0, 0.005);
  EXPECT_NEAR(std::sqrt(sq / n), std::sqrt(2.0 / (64 * 9)), 0.002);
  EXPECT_EQ(nn::init::fans(w), (std::pair<int64_t, int64_t>{32 * 9, 64 * 9}));
  nn::Linear fc(100, 10, rng);
  const float bound = 1.0f / std::sqrt(100.0f);  // sqrt(1/3) * sqrt(3/100)
  float maxW = 0, maxB = 0;
  for (float v : fc.weight().toFloatVector()) maxW = std::max(maxW, std::abs(v));
  for (float v : fc.bias().toFloatVector()) maxB = std::max(maxB, std::abs(v));
  EXPECT_LE(maxW, bound);
  EXPECT_GT(maxW, 0.9f * bound);
  EXPECT_LE(maxB, bound);
}

TEST(Layers, ConstructorsRejectBadSpecs) {
  aps::Rng rng(8);
  EXPECT_THROW(nn::Conv2d(nn::Conv2dSpec{.in = 3, .out = 4, .kernel = 3, .groups = 2}, rng), aps::Error);
  EXPECT_THROW(nn::Conv2d(nn::Conv2dSpec{.in = 3, .out = 4, .kernel = 3, .stride = 0}, rng), aps::Error);
  EXPECT_THROW(nn::Linear(0, 3, rng), aps::Error);
  EXPECT_THROW(nn::BatchNorm2d(0), aps::Error);
  nn::Sequential seq;
}

}  // namespace
