#include "models/ModelRegistry.h"

#include "framework/core/Error.h"
#include "models/Fcn.h"
#include "models/ResNet.h"
#include "models/Mlp.h"
#include "models/SmallConvNet.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>

namespace aps::models {

namespace {

constexpr int64_t kCifarClasses = 10;
constexpr int64_t kImageNetClasses = 1000;
constexpr int64_t kCityscapesClasses = 19;  // the APS artifact's FCN workload

// The small FCN for CPU runs: CIFAR ResNet-20 with stage 3's stride replaced by dilation 2, so
// the output stride is 2 (a 64x64 input gives 32x32 features). Output stride 1 (stage 2
// dilated too) would cost about 3x the FLOPs for little gain before the x2 bilinear upsampling.
ResNetSpec fcnResNet20Backbone() {
  ResNetSpec spec = ResNetSpec::cifar(20);
  spec.dilate = {false, false, true};
  return spec;
}

// Output stride 8 ("D8"): torchvision's replace_stride_with_dilation = [False, True, True].
ResNetSpec d8Backbone(int depth) {
  ResNetSpec spec = ResNetSpec::imagenet(depth);
  spec.dilate = {false, false, true, true};
  return spec;
}

struct Entry {
  ModelInfo info;
  std::function<std::shared_ptr<nn::Module>(const ModelOptions&)> build;
};

std::shared_ptr<nn::Module> buildResNet(ResNetSpec spec, const ModelOptions& options) {
  spec.numClasses = options.numClasses;
  spec.inChannels = options.inChannels;
  spec.seed = options.seed;
  return std::make_shared<ResNet>(spec);
}

std::shared_ptr<nn::Module> buildFcn(ResNetSpec backbone, const ModelOptions& options) {
  backbone.inChannels = options.inChannels;
  return std::make_shared<Fcn>(backbone, options.numClasses, options.seed);
}

Entry cifarResNet(int depth) {
  return {{fmt::format("resnet{}", depth), fmt::format("CIFAR ResNet-{} (He et al. 2016, option B shortcuts)", depth),
           kCifarClasses, false},
          [depth](const ModelOptions& o) { return buildResNet(ResNetSpec::cifar(depth), o); }};
}

Entry imagenetResNet(int depth) {
  return {{fmt::format("resnet{}", depth), fmt::format("torchvision ResNet-{}", depth), kImageNetClasses, false},
          [depth](const ModelOptions& o) { return buildResNet(ResNetSpec::imagenet(depth), o); }};
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = [] {
    std::vector<Entry> t;
    for (int depth : {20, 32, 44, 56, 110}) t.push_back(cifarResNet(depth));
    t.push_back({{"resnet18_cifar", "torchvision ResNet-18 with a 3x3 stride-1 stem and no max pool (APS artifact)",
                  kCifarClasses, false},
                 [](const ModelOptions& o) { return buildResNet(ResNetSpec::cifarResNet18(), o); }});
    for (int depth : {18, 34, 50, 101, 152}) t.push_back(imagenetResNet(depth));
    t.push_back({{"fcn_resnet18_d8", "FCN on a dilated ResNet-18, output stride 8", kCityscapesClasses, true},
                 [](const ModelOptions& o) { return buildFcn(d8Backbone(18), o); }});
    t.push_back(
        {{"fcn_resnet50_d8", "FCN on a dilated ResNet-50, output stride 8 (FCN-R50-D8)", kCityscapesClasses, true},
         [](const ModelOptions& o) { return buildFcn(d8Backbone(50), o); }});
    t.push_back({{"fcn_resnet20", "FCN on a dilated CIFAR ResNet-20, output stride 2 (small, for CPUs)",
                  kCityscapesClasses, true},
                 [](const ModelOptions& o) { return buildFcn(fcnResNet20Backbone(), o); }});
    t.push_back(
        {{"convnet", "small CNN without batch norm (2 convs, global pooling, linear; for tests)", kCifarClasses, false},
         [](const ModelOptions& o) { return std::make_shared<SmallConvNet>(o.inChannels, o.numClasses, o.seed); }});
    t.push_back({{"mlp",
                  "multilayer perceptron: the flattened input, hidden layers of model.widths, ReLU between "
                  "(Dettmers' MNIST 784-1200-1200-10 by default)",
                  kCifarClasses, false},
                 [](const ModelOptions& o) {
                   return std::make_shared<Mlp>(o.widths.empty() ? std::vector<int64_t>{784, 1200, 1200} : o.widths,
                                                o.numClasses, o.seed);
                 }});
    return t;
  }();
  return table;
}

const Entry& entryFor(const std::string& name) {
  for (const auto& e : entries()) {
    if (e.info.name == name) return e;
  }
  APS_FAIL("models: unknown model '{}'; known models: {}", name, fmt::join(modelNames(), ", "));
}

}  // namespace

const std::vector<ModelInfo>& modelCatalog() {
  static const std::vector<ModelInfo> catalog = [] {
    std::vector<ModelInfo> out;
    for (const auto& e : entries()) out.push_back(e.info);
    return out;
  }();
  return catalog;
}

std::vector<std::string> modelNames() {
  std::vector<std::string> names;
  for (const auto& e : entries()) names.push_back(e.info.name);
  return names;
}

const ModelInfo& modelInfo(const std::string& name) { return entryFor(name).info; }

std::shared_ptr<nn::Module> createModel(const std::string& name, const ModelOptions& options) {
  const Entry& entry = entryFor(name);
  APS_CHECK(options.numClasses >= 0, "models: num_classes must be >= 1 (or 0 for the default), got {}",
            options.numClasses);
  APS_CHECK(options.inChannels >= 1, "models: in_channels must be >= 1, got {}", options.inChannels);
  ModelOptions resolved = options;
  if (resolved.numClasses == 0) resolved.numClasses = entry.info.defaultNumClasses;
  return entry.build(resolved);
}

}  // namespace aps::models
