#include "models/Fcn.h"

#include "framework/core/Error.h"
#include "framework/nn/BatchNorm2d.h"
#include "framework/nn/Conv2d.h"
#include "framework/nn/Dropout.h"
#include "framework/nn/ReLU.h"
#include "framework/ops/Upsample.h"

namespace aps::models {

Fcn::Fcn(ResNetSpec backboneSpec, int64_t numClasses, uint64_t seed) : Module("Fcn") {
  APS_CHECK(numClasses >= 1, "Fcn: num_classes must be >= 1, got {}", numClasses);
  backboneSpec.numClasses = 0;
  backboneSpec.seed = seed;
  backbone_ = registerModule("backbone", std::make_shared<ResNet>(backboneSpec));
  // torchvision's FCNHead: the hidden width is a quarter of the backbone's channels.
  const int64_t in = backbone_->outChannels();
  const int64_t hidden = in / 4;
  Rng rng(seed ^ 0x5eed'fc4eULL);  // a stream apart from the backbone's
  classifier_ = registerModule("classifier", std::make_shared<nn::Sequential>());
  classifier_->add(std::make_shared<nn::Conv2d>(
      nn::Conv2dSpec{.in = in, .out = hidden, .kernel = 3, .padding = 1, .bias = false}, rng));
  classifier_->add(std::make_shared<nn::BatchNorm2d>(hidden));
  classifier_->add(std::make_shared<nn::ReLU>());
  classifier_->add(std::make_shared<nn::Dropout>(0.1f, seed));
  classifier_->add(std::make_shared<nn::Conv2d>(nn::Conv2dSpec{.in = hidden, .out = numClasses, .kernel = 1}, rng));
}

Tensor Fcn::forward(const Tensor& input) {
  Tensor x = backbone_->features(input);  // (N, in, H / os, W / os)
  x = classifier_->forward(x);            // (N, classes, H / os, W / os)
  return ops::upsampleBilinear(x, input.size(2), input.size(3));
}

}  // namespace aps::models
