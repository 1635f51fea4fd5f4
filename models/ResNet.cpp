#include "models/ResNet.h"

#include "framework/core/Error.h"
#include "framework/nn/Init.h"
#include "framework/ops/Pooling.h"
#include "framework/ops/Shaping.h"
#include "models/BasicBlock.h"
#include "models/Bottleneck.h"

#include <string>

namespace aps::models {

ResNetSpec ResNetSpec::imagenet(int depth) {
  ResNetSpec spec;
  spec.widths = {64, 128, 256, 512};
  switch (depth) {
    case 18:
      spec.blocks = {2, 2, 2, 2};
      break;
    case 34:
      spec.blocks = {3, 4, 6, 3};
      break;
    case 50:
      spec.blocks = {3, 4, 6, 3};
      break;
    case 101:
      spec.blocks = {3, 4, 23, 3};
      break;
    case 152:
      spec.blocks = {3, 8, 36, 3};
      break;
    default:
      APS_FAIL("ResNet: no ImageNet ResNet of depth {} (18, 34, 50, 101, 152)", depth);
  }
  spec.block = depth >= 50 ? ResNetBlockKind::Bottleneck : ResNetBlockKind::Basic;
  return spec;
}

ResNetSpec ResNetSpec::cifar(int depth) {
  APS_CHECK(depth >= 8 && (depth - 2) % 6 == 0, "ResNet: CIFAR ResNet depth must be 6n+2 (20, 32, 44, 56, 110), got {}",
            depth);
  const int64_t n = (depth - 2) / 6;
  ResNetSpec spec;
  spec.stem = ResNetStem::Cifar;
  spec.stemWidth = 16;
  spec.blocks = {n, n, n};
  spec.widths = {16, 32, 64};
  spec.numClasses = 10;
  return spec;
}

ResNetSpec ResNetSpec::cifarResNet18() {
  ResNetSpec spec = imagenet(18);
  spec.stem = ResNetStem::Cifar;
  spec.numClasses = 10;
  return spec;
}

ResNet::ResNet(const ResNetSpec& spec) : Module("ResNet"), spec_(spec) {
  APS_CHECK(!spec.blocks.empty() && spec.blocks.size() == spec.widths.size(),
            "ResNet: blocks ({} stages) and widths ({} stages) must be non-empty and agree", spec.blocks.size(),
            spec.widths.size());
  APS_CHECK(spec.dilate.empty() || spec.dilate.size() == spec.blocks.size(),
            "ResNet: dilate has {} entries for {} stages", spec.dilate.size(), spec.blocks.size());
  APS_CHECK(spec.dilate.empty() || !spec.dilate[0], "ResNet: the first stage has stride 1 and cannot be dilated");
  APS_CHECK(spec.inChannels >= 1 && spec.numClasses >= 0, "ResNet: in_channels {} must be >= 1, num_classes {} >= 0",
            spec.inChannels, spec.numClasses);
  Rng rng(spec.seed);
  const bool imagenetStem = spec.stem == ResNetStem::ImageNet;
  conv1_ = registerModule("conv1", std::make_shared<nn::Conv2d>(nn::Conv2dSpec{.in = spec.inChannels,
                                                                               .out = spec.stemWidth,
                                                                               .kernel = imagenetStem ? 7 : 3,
                                                                               .stride = imagenetStem ? 2 : 1,
                                                                               .padding = imagenetStem ? 3 : 1,
                                                                               .bias = false},
                                                                rng));
  bn1_ = registerModule("bn1", std::make_shared<nn::BatchNorm2d>(spec.stemWidth));
  outputStride_ = imagenetStem ? 4 : 1;
  inplanes_ = spec.stemWidth;
  for (size_t i = 0; i < spec.blocks.size(); ++i) {
    const bool dilate = !spec.dilate.empty() && spec.dilate[i];
    auto stage = makeStage(spec.widths[i], spec.blocks[i], i == 0 ? 1 : 2, dilate, rng);
    stages_.push_back(registerModule("layer" + std::to_string(i + 1), stage));
  }
  outChannels_ = inplanes_;
  if (spec.numClasses > 0) {
    registerModule("fc", std::make_shared<nn::Linear>(outChannels_, spec.numClasses, rng));
    hasClassifier_ = true;
  }

  // torchvision's init loop over self.modules(): Kaiming normal (fan_out, ReLU) for every conv;
  // BN already starts at weight 1, bias 0.
  for (auto& [name, module] : namedModules()) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(module)) nn::init::kaimingNormal(conv->weight(), rng);
  }
}

std::shared_ptr<nn::Sequential> ResNet::makeStage(int64_t planes, int64_t blocks, int64_t stride, bool dilate,
                                                  Rng& rng) {
  // torchvision's _make_layer: a dilated stage keeps the resolution and multiplies the dilation;
  // its first block still uses the previous dilation.
  const int64_t previousDilation = dilation_;
  if (dilate) {
    dilation_ *= stride;
    stride = 1;
  }
  outputStride_ *= stride;
  const bool bottleneck = spec_.block == ResNetBlockKind::Bottleneck;
  const int64_t expansion = bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;
  auto stage = std::make_shared<nn::Sequential>();
  for (int64_t b = 0; b < blocks; ++b) {
    ResNetBlockSpec blockSpec{.in = inplanes_,
                              .planes = planes,
                              .stride = b == 0 ? stride : 1,
                              .dilation = b == 0 ? previousDilation : dilation_,
                              .downsample = b == 0 && (stride != 1 || inplanes_ != planes * expansion)};
    if (bottleneck) {
      stage->add(std::make_shared<Bottleneck>(blockSpec, rng));
    } else {
      stage->add(std::make_shared<BasicBlock>(blockSpec, rng));
    }
    inplanes_ = planes * expansion;
  }
  return stage;
}

Tensor ResNet::features(const Tensor& input) {
  APS_CHECK(input.dim() == 4 && input.size(1) == spec_.inChannels, "ResNet: expected input (N, {}, H, W), got shape {}",
            spec_.inChannels, input.shapeString());
  Tensor x = bn1_->forwardRelu(conv1_->forward(input));
  if (spec_.stem == ResNetStem::ImageNet) {
    x = ops::maxPool2d(x, {.kernelH = 3, .kernelW = 3, .strideH = 2, .strideW = 2, .padH = 1, .padW = 1});
  }
  for (auto& stage : stages_) x = stage->forward(x);
  return x;
}

Tensor ResNet::forward(const Tensor& input) {
  Tensor x = features(input);  // (N, outChannels, h, w)
  if (!hasClassifier_) return x;
  x = ops::flatten(ops::adaptiveAvgPool2d(x, 1, 1), 1);  // (N, outChannels)
  return child("fc")->forward(x);  // a lookup, not a pointer: parallel.split may replace it
}

}  // namespace aps::models
