// The engine end to end against PyTorch 1.13 (tools/fixtures/engine_block_fixture.py): the
// same residual network, weights and batch give the same loss, parameter gradients and
// batch-norm buffers, and the same state-dict names in the same order.
#include "framework/autograd/Engine.h"
#include "framework/io/Safetensors.h"
#include "framework/nn/BatchNorm2d.h"
#include "framework/nn/Conv2d.h"
#include "framework/nn/Linear.h"
#include "framework/ops/Elementwise.h"
#include "framework/ops/Loss.h"
#include "framework/ops/Pooling.h"
#include "framework/ops/Shaping.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace {

using aps::Tensor;
namespace nn = aps::nn;

class Net : public nn::Module {
 public:
  explicit Net(aps::Rng& rng) : Module("Net") {
    conv1_ = registerModule(
        "conv1",
        std::make_shared<nn::Conv2d>(nn::Conv2dSpec{.in = 3, .out = 4, .kernel = 3, .padding = 1, .bias = false}, rng));
    bn1_ = registerModule("bn1", std::make_shared<nn::BatchNorm2d>(4));
    conv2_ = registerModule(
        "conv2",
        std::make_shared<nn::Conv2d>(nn::Conv2dSpec{.in = 4, .out = 6, .kernel = 3, .stride = 2, .padding = 1}, rng));
    bn2_ = registerModule("bn2", std::make_shared<nn::BatchNorm2d>(6));
    short_ = registerModule(
        "short",
        std::make_shared<nn::Conv2d>(nn::Conv2dSpec{.in = 3, .out = 6, .kernel = 1, .stride = 2, .bias = false}, rng));
    fc_ = registerModule("fc", std::make_shared<nn::Linear>(6, 5, rng));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = aps::ops::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    y = aps::ops::relu(y + short_->forward(x));
    return fc_->forward(aps::ops::flatten(aps::ops::adaptiveAvgPool2d(y, 1, 1)));
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_, short_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::Linear> fc_;
};

void expectClose(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const auto a = actual.toFloatVector(), e = expected.toFloatVector();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], e[i], 1e-5 + 1e-4 * std::abs(e[i])) << what << " element " << i;
  }
}

TEST(TorchReference, ResidualNetworkForwardBackwardMatchesPyTorch) {
  const auto file =
      aps::io::loadSafetensors(std::string(APS_SOURCE_DIR) + "/tests/fixtures/nn/residual_block.safetensors");
  std::map<std::string, Tensor> ref;
  aps::NamedTensors initial;
  for (const auto& [name, tensor] : file.tensors) {
    ref[name] = tensor;
    if (name.rfind("init.", 0) == 0) initial.push_back({name.substr(5), tensor});
  }
  aps::Rng rng(0);
  Net net(rng);
  // Same names in the same order as torch's state_dict.
  const auto state = net.stateDict();
  ASSERT_EQ(state.size(), initial.size());
  for (size_t i = 0; i < state.size(); ++i) EXPECT_EQ(state[i].name, initial[i].name);
  net.loadStateDict(initial);

  Tensor loss = aps::ops::crossEntropy(net.forward(ref.at("input")), ref.at("targets"), {0.1f, -100});
  EXPECT_NEAR(loss.item(), ref.at("loss").item(), 1e-5 * std::abs(ref.at("loss").item()));
  aps::autograd::backward(loss);
  for (const auto& [name, param] : net.namedParameters()) expectClose(param.grad(), ref.at("grad." + name), name);
  for (const auto& [name, buffer] : net.namedBuffers()) {
    if (buffer.dtype() == aps::DType::Int64) {
      EXPECT_EQ(buffer.toVector<int64_t>(), ref.at("after." + name).toVector<int64_t>()) << name;
    } else {
      expectClose(buffer, ref.at("after." + name), name);
    }
  }
}

}  // namespace
