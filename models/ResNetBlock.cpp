#include "models/ResNetBlock.h"

namespace aps::models {

std::shared_ptr<nn::Sequential> makeDownsample(int64_t in, int64_t out, int64_t stride, Rng& rng) {
  auto downsample = std::make_shared<nn::Sequential>();
  downsample->add(std::make_shared<nn::Conv2d>(
      nn::Conv2dSpec{.in = in, .out = out, .kernel = 1, .stride = stride, .bias = false}, rng));
  downsample->add(std::make_shared<nn::BatchNorm2d>(out));
  return downsample;
}

}  // namespace aps::models
