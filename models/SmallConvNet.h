#pragma once

#include "framework/nn/Sequential.h"

#include <cstdint>

namespace aps::models {

// A small CNN without batch norm (no buffers, no cross-sample statistics), for tests and
// studies where data-parallel training must equal single-process training on the combined
// batch exactly in exact arithmetic: conv3x3(in,16)-ReLU-maxpool2-conv3x3(16,32)-ReLU-maxpool2-
// global average pool-linear(32, classes). Any input size >= 4x4. PyTorch's default init.
class SmallConvNet : public nn::Sequential {
 public:
  SmallConvNet(int64_t inChannels, int64_t numClasses, uint64_t seed);
};

}  // namespace aps::models
