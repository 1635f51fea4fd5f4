#pragma once

#include "framework/core/Rng.h"
#include "framework/nn/BatchNorm2d.h"
#include "framework/nn/Conv2d.h"
#include "framework/nn/Linear.h"
#include "framework/nn/Module.h"
#include "framework/nn/Sequential.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace aps::models {

enum class ResNetBlockKind { Basic, Bottleneck };

enum class ResNetStem {
  ImageNet,  // 7x7 stride-2 conv, BN, ReLU, 3x3 stride-2 max pool (torchvision)
  Cifar,     // 3x3 stride-1 conv, BN, ReLU, no pool (He et al. 2016, section 4.2)
};

// Everything that distinguishes one ResNet from another. Stage i has blocks[i] blocks of
// width widths[i]; every stage but the first halves the resolution with stride 2 on its first
// block, unless dilate[i] replaces that stride by dilation (torchvision's
// replace_stride_with_dilation; Chen et al., DeepLab, and Yu & Koltun 2016).
struct ResNetSpec {
  ResNetBlockKind block = ResNetBlockKind::Basic;
  ResNetStem stem = ResNetStem::ImageNet;
  int64_t stemWidth = 64;
  std::vector<int64_t> blocks;
  std::vector<int64_t> widths;
  std::vector<bool> dilate;  // empty: no dilation
  int64_t inChannels = 3;
  int64_t numClasses = 1000;  // 0: no pooling/fc head, forward() returns the last stage's features
  uint64_t seed = 0;          // initialisation

  // torchvision resnet18/34/50/101/152 (He et al. 2016, table 1).
  static ResNetSpec imagenet(int depth);
  // CIFAR ResNet of depth 6n+2 (20, 32, 44, 56, 110, ...): 3x3 16-channel stem, three stages of
  // n basic blocks with 16/32/64 channels, projection shortcuts (option B).
  static ResNetSpec cifar(int depth);
  // torchvision's BasicBlock ResNet-18 with a 3x3 stride-1 stem and no max pool: the CIFAR-10
  // network of the APS artifact.
  static ResNetSpec cifarResNet18();
};

// A ResNet with torchvision's module names and state_dict order: conv1, bn1, layer1..layerK
// (each a Sequential of blocks "0", "1", ...), fc. Convs are initialised with Kaiming normal
// (fan_out, ReLU gain; He et al. 2015) and BN with weight 1, bias 0, as torchvision does; fc
// keeps PyTorch's default Linear init.
class ResNet : public nn::Module {
 public:
  explicit ResNet(const ResNetSpec& spec);
  // (N, C, H, W) -> (N, numClasses), or the last stage's features when numClasses == 0.
  Tensor forward(const Tensor& input) override;
  // (N, C, H, W) -> (N, outChannels(), H / outputStride(), W / outputStride()).
  Tensor features(const Tensor& input);
  int64_t outChannels() const { return outChannels_; }
  int64_t outputStride() const { return outputStride_; }
  const ResNetSpec& spec() const { return spec_; }

 private:
  std::shared_ptr<nn::Sequential> makeStage(int64_t planes, int64_t blocks, int64_t stride, bool dilate, Rng& rng);

  ResNetSpec spec_;
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::vector<std::shared_ptr<nn::Sequential>> stages_;
  bool hasClassifier_ = false;  // child "fc"
  int64_t inplanes_ = 0;  // channels entering the next stage while building
  int64_t dilation_ = 1;  // current dilation while building
  int64_t outChannels_ = 0;
  int64_t outputStride_ = 1;
};

}  // namespace aps::models
