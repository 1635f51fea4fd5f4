#pragma once

#include "framework/core/Rng.h"
#include "framework/nn/BatchNorm2d.h"
#include "framework/nn/Conv2d.h"
#include "framework/nn/Module.h"
#include "framework/nn/Sequential.h"

#include <cstdint>
#include <memory>

namespace aps::models {

// What a residual block needs to know (torchvision's BasicBlock/Bottleneck arguments).
struct ResNetBlockSpec {
  int64_t in = 64;      // input channels
  int64_t planes = 64;  // width of the block; the output has planes * expansion channels
  int64_t stride = 1;   // on the first 3x3 conv (torchvision "ResNet v1.5" for bottlenecks)
  int64_t dilation = 1;
  bool downsample = false;  // projection shortcut (option B): 1x1 conv (stride) + BN
};

// The projection shortcut "downsample" = Sequential(1x1 conv, BN) of torchvision, used when the
// block changes the shape (He et al. 2016, "Deep Residual Learning", option B).
std::shared_ptr<nn::Sequential> makeDownsample(int64_t in, int64_t out, int64_t stride, Rng& rng);

}  // namespace aps::models
