#include "models/BasicBlock.h"

namespace aps::models {

BasicBlock::BasicBlock(const ResNetBlockSpec& spec, Rng& rng) : Module("BasicBlock") {
  const int64_t d = spec.dilation;
  conv1_ = registerModule("conv1", std::make_shared<nn::Conv2d>(nn::Conv2dSpec{.in = spec.in,
                                                                               .out = spec.planes,
                                                                               .kernel = 3,
                                                                               .stride = spec.stride,
                                                                               .padding = d,
                                                                               .dilation = d,
                                                                               .bias = false},
                                                                rng));
  bn1_ = registerModule("bn1", std::make_shared<nn::BatchNorm2d>(spec.planes));
  conv2_ = registerModule(
      "conv2", std::make_shared<nn::Conv2d>(
                   nn::Conv2dSpec{
                       .in = spec.planes, .out = spec.planes, .kernel = 3, .padding = d, .dilation = d, .bias = false},
                   rng));
  bn2_ = registerModule("bn2", std::make_shared<nn::BatchNorm2d>(spec.planes));
  if (spec.downsample) {
    downsample_ = registerModule("downsample", makeDownsample(spec.in, spec.planes * kExpansion, spec.stride, rng));
  }
}

Tensor BasicBlock::forward(const Tensor& input) {
  Tensor out = bn1_->forwardRelu(conv1_->forward(input));  // (N, planes, H/s, W/s)
  out = conv2_->forward(out);
  const Tensor identity = downsample_ ? downsample_->forward(input) : input;
  return bn2_->forwardRelu(out, identity);  // relu(bn2(out) + identity)
}

}  // namespace aps::models
