#pragma once

#include "models/ResNetBlock.h"

namespace aps::models {

// torchvision's BasicBlock (He et al. 2016): two 3x3 convs with BN, identity or projection
// shortcut, ReLU after the sum. Children in torchvision's order: conv1, bn1, conv2, bn2,
// downsample. torchvision refuses dilation > 1 here; we dilate both 3x3 convs (padding =
// dilation), so a dilated block sees the same neighbourhood as the strided original on the
// downsampled map (Yu & Koltun 2016), which the FCN-ResNet18-D8 backbone needs.
class BasicBlock : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(const ResNetBlockSpec& spec, Rng& rng);
  Tensor forward(const Tensor& input) override;

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::Sequential> downsample_;  // null: identity shortcut
};

}  // namespace aps::models
