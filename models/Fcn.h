#pragma once

#include "framework/nn/Module.h"
#include "framework/nn/Sequential.h"
#include "models/ResNet.h"

#include <cstdint>
#include <memory>

namespace aps::models {

// Fully convolutional network for semantic segmentation (Long, Shelhamer & Darrell 2015) on a
// dilated ResNet backbone, laid out as torchvision's fcn_resnet50 without the auxiliary head
// (output stride 8 as in mmseg's FCN-R50-D8, whose ResNetV1c deep stem and two-conv head with
// input concatenation we do not copy): backbone features -> FCN head -> bilinear upsampling
// (align_corners false) to the input size. Names follow torchvision: backbone.conv1, ..., backbone.layer4,
// classifier.0 (3x3 conv to in/4 channels), classifier.1 (BN), classifier.4 (1x1 conv to the
// classes); classifier.2 is the ReLU and classifier.3 the dropout (p = 0.1).
class Fcn : public nn::Module {
 public:
  // backboneSpec.numClasses is ignored (the backbone has no head).
  Fcn(ResNetSpec backboneSpec, int64_t numClasses, uint64_t seed = 0);
  // (N, C, H, W) -> per-pixel logits (N, numClasses, H, W).
  Tensor forward(const Tensor& input) override;
  ResNet& backbone() { return *backbone_; }

 private:
  std::shared_ptr<ResNet> backbone_;
  std::shared_ptr<nn::Sequential> classifier_;
};

}  // namespace aps::models
