#pragma once

#include "models/ResNetBlock.h"

namespace aps::models {

// torchvision's Bottleneck ("ResNet v1.5"): 1x1 reduce, 3x3 (carrying the stride and the
// dilation), 1x1 expand by 4, each followed by BN; ReLU after the sum. Children in
// torchvision's order: conv1, bn1, conv2, bn2, conv3, bn3, downsample.
class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(const ResNetBlockSpec& spec, Rng& rng);
  Tensor forward(const Tensor& input) override;

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_, bn3_;
  std::shared_ptr<nn::Sequential> downsample_;  // null: identity shortcut
};

}  // namespace aps::models
