#include "models/Bottleneck.h"

namespace aps::models {

Bottleneck::Bottleneck(const ResNetBlockSpec& spec, Rng& rng) : Module("Bottleneck") {
  const int64_t width = spec.planes;  // groups 1, base width 64
  const int64_t out = spec.planes * kExpansion;
  conv1_ = registerModule("conv1", std::make_shared<nn::Conv2d>(
                                       nn::Conv2dSpec{.in = spec.in, .out = width, .kernel = 1, .bias = false}, rng));
  bn1_ = registerModule("bn1", std::make_shared<nn::BatchNorm2d>(width));
  conv2_ = registerModule("conv2", std::make_shared<nn::Conv2d>(nn::Conv2dSpec{.in = width,
                                                                               .out = width,
                                                                               .kernel = 3,
                                                                               .stride = spec.stride,
                                                                               .padding = spec.dilation,
                                                                               .dilation = spec.dilation,
                                                                               .bias = false},
                                                                rng));
  bn2_ = registerModule("bn2", std::make_shared<nn::BatchNorm2d>(width));
  conv3_ = registerModule(
      "conv3", std::make_shared<nn::Conv2d>(nn::Conv2dSpec{.in = width, .out = out, .kernel = 1, .bias = false}, rng));
  bn3_ = registerModule("bn3", std::make_shared<nn::BatchNorm2d>(out));
  if (spec.downsample) downsample_ = registerModule("downsample", makeDownsample(spec.in, out, spec.stride, rng));
}

Tensor Bottleneck::forward(const Tensor& input) {
  Tensor out = bn1_->forwardRelu(conv1_->forward(input));
  out = bn2_->forwardRelu(conv2_->forward(out));  // (N, width, H/s, W/s)
  out = conv3_->forward(out);                     // (N, 4 width, H/s, W/s)
  const Tensor identity = downsample_ ? downsample_->forward(input) : input;
  return bn3_->forwardRelu(out, identity);  // relu(bn3(out) + identity)
}

}  // namespace aps::models
