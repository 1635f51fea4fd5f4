#pragma once

#include "framework/nn/Module.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace aps::models {

struct ModelOptions {
  int64_t numClasses = 0;  // 0: the model's default (ModelInfo::defaultNumClasses)
  int64_t inChannels = 3;  // 1 for Fashion-MNIST, 3 for CIFAR/ImageNet/Cityscapes
  uint64_t seed = 0;       // initialisation (and the FCN's dropout stream)
  // mlp: the input features and the hidden widths (empty: 784, 1200, 1200, Dettmers' MNIST net)
  std::vector<int64_t> widths = {};
};

struct ModelInfo {
  std::string name;
  std::string description;
  int64_t defaultNumClasses = 10;
  bool segmentation = false;  // forward gives (N, classes, H, W) logits instead of (N, classes)
};

// Every model buildable by name, in a fixed order: the CIFAR ResNets (resnet20, resnet32,
// resnet44, resnet56, resnet110, resnet18_cifar), the torchvision ResNets (resnet18, resnet34,
// resnet50, resnet101, resnet152) and the FCNs (fcn_resnet18_d8, fcn_resnet50_d8: output stride
// 8; fcn_resnet20: CIFAR ResNet-20 with stage 3 dilated, output stride 2, for CPU runs on
// small images), convnet (a small CNN without batch norm) and mlp (fully connected layers of
// ModelOptions::widths). Default classes: 10 (CIFAR models), 1000 (ImageNet), 19 (FCNs, Cityscapes).
const std::vector<ModelInfo>& modelCatalog();
std::vector<std::string> modelNames();
// Throws aps::Error listing the known names when `name` is unknown.
const ModelInfo& modelInfo(const std::string& name);
std::shared_ptr<nn::Module> createModel(const std::string& name, const ModelOptions& options = {});

}  // namespace aps::models
