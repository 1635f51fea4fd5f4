#pragma once

#include "framework/nn/Linear.h"
#include "framework/nn/Module.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace aps::models {

// A multilayer perceptron: the input flattened to C x H x W features, then fully connected
// layers fc1 .. fcK with ReLU between them, fcK the classifier. `widths` lists the input
// features and the hidden layers' widths (Dettmers' MNIST network 784-1200-1200-10 is widths
// {784, 1200, 1200} with 10 classes). PyTorch's default init, layers drawn in order.
class Mlp : public nn::Module {
 public:
  Mlp(std::vector<int64_t> widths, int64_t numClasses, uint64_t seed);
  Tensor forward(const Tensor& input) override;
  const std::vector<int64_t>& widths() const { return widths_; }

 private:
  std::vector<int64_t> widths_;
};

}  // namespace aps::models
