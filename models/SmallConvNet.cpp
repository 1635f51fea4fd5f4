#include "models/SmallConvNet.h"

#include "framework/core/Rng.h"
#include "framework/nn/AdaptiveAvgPool2d.h"
#include "framework/nn/Conv2d.h"
#include "framework/nn/Flatten.h"
#include "framework/nn/Linear.h"
#include "framework/nn/MaxPool2d.h"
#include "framework/nn/ReLU.h"

#include <memory>

namespace aps::models {

namespace {
constexpr int64_t kWidth1 = 16, kWidth2 = 32;
}

SmallConvNet::SmallConvNet(int64_t inChannels, int64_t numClasses, uint64_t seed) {
  Rng rng(seed);
  const ops::Pool2dOptions pool{.kernelH = 2, .kernelW = 2};
  add(std::make_shared<nn::Conv2d>(nn::Conv2dSpec{.in = inChannels, .out = kWidth1, .kernel = 3, .padding = 1}, rng));
  add(std::make_shared<nn::ReLU>());
  add(std::make_shared<nn::MaxPool2d>(pool));
  add(std::make_shared<nn::Conv2d>(nn::Conv2dSpec{.in = kWidth1, .out = kWidth2, .kernel = 3, .padding = 1}, rng));
  add(std::make_shared<nn::ReLU>());
  add(std::make_shared<nn::MaxPool2d>(pool));
  add(std::make_shared<nn::AdaptiveAvgPool2d>(1, 1));
  add(std::make_shared<nn::Flatten>());
  add(std::make_shared<nn::Linear>(kWidth2, numClasses, rng));
}

}  // namespace aps::models
