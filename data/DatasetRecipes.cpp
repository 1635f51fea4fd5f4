#include "data/DatasetRecipes.h"

#include "data/CifarSource.h"
#include "data/FashionMnistSegmentation.h"
#include "data/GeometricTransforms.h"
#include "data/ImageFolderSource.h"
#include "data/MnistFiles.h"
#include "data/SegmentationPairSource.h"
#include "data/TransformedDataset.h"
#include "framework/core/Error.h"

#include <filesystem>

namespace aps::data {

namespace {

using Transforms = std::vector<std::shared_ptr<const Transform>>;

Normalize imageNetNorm() { return Normalize({0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}); }

std::shared_ptr<const Dataset> segmentation(std::shared_ptr<const ExampleSource> source, const DatasetSpec& spec,
                                            int cropH, int cropW, bool evalCrop) {
  Transforms t;
  if (spec.augment) {
    t = {std::make_shared<RandomScale>(0.5, 2.0), std::make_shared<RandomCrop>(cropH, cropW),
         std::make_shared<RandomHorizontalFlip>()};
  } else if (evalCrop) {
    t = {std::make_shared<CenterCrop>(cropH, cropW)};
  }
  return std::make_shared<TransformedDataset>(std::move(source), std::move(t), imageNetNorm());
}

}  // namespace

std::shared_ptr<const Dataset> makeDataset(const DatasetSpec& spec) {
  const std::string& name = spec.name;
  APS_CHECK(spec.maxImagePixels <= kMaxImagePixels, "dataset {}: maxImagePixels {} is above the decoder's limit {}",
            name, spec.maxImagePixels, kMaxImagePixels);
  const uint64_t maxPixels = spec.maxImagePixels > 0 ? spec.maxImagePixels : kMaxImagePixels;
  APS_CHECK(spec.cropSize >= 0, "dataset {}: cropSize must be >= 0, got {}", name, spec.cropSize);
  if (name == "fashion_mnist" || name == "mnist") {
    const bool fashion = name == "fashion_mnist";
    std::shared_ptr<const ExampleSource> source;
    if (fashion) {
      source = openFashionMnist(spec.split, spec.root.empty() ? kFashionMnistDir : spec.root);
    } else {
      APS_CHECK(!spec.root.empty(), "dataset mnist needs a root folder");
      source = openMnistLayout(spec.root, spec.split);
    }
    Transforms t;
    if (spec.augment) {
      t.push_back(std::make_shared<RandomCrop>(28, 28, 2));
      if (fashion) t.push_back(std::make_shared<RandomHorizontalFlip>());
    }
    return std::make_shared<TransformedDataset>(
        source, t, fashion ? Normalize({0.2860f}, {0.3530f}) : Normalize({0.1307f}, {0.3081f}));
  }
  if (name == "cifar10" || name == "cifar100" || name == "cifar100_coarse") {
    APS_CHECK(!spec.root.empty(), "dataset {} needs a root folder", name);
    const auto variant = name == "cifar10"    ? CifarSource::Variant::kCifar10
                         : name == "cifar100" ? CifarSource::Variant::kCifar100Fine
                                              : CifarSource::Variant::kCifar100Coarse;
    Transforms t;
    if (spec.augment) t = {std::make_shared<RandomCrop>(32, 32, 4), std::make_shared<RandomHorizontalFlip>()};
    // Per-channel statistics of the training images.
    Normalize norm = name == "cifar10" ? Normalize({0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f})
                                       : Normalize({0.5071f, 0.4865f, 0.4409f}, {0.2673f, 0.2564f, 0.2762f});
    return std::make_shared<TransformedDataset>(std::make_shared<CifarSource>(spec.root, spec.split, variant), t, norm);
  }
  if (name == "imagenet" || name == "image_folder") {
    APS_CHECK(!spec.root.empty(), "dataset {} needs a root folder (holding train/ and val/)", name);
    const int size = spec.cropSize > 0 ? spec.cropSize : 224;
    Transforms t;
    if (spec.augment) {
      t = {std::make_shared<RandomResizedCrop>(size), std::make_shared<RandomHorizontalFlip>()};
    } else {
      // torchvision's evaluation recipe: resize to size / 0.875 (256 for 224), centre crop.
      t = {std::make_shared<Resize>(size * 8 / 7), std::make_shared<CenterCrop>(size)};
    }
    const std::string folder = (std::filesystem::path(spec.root) / spec.split).string();
    return std::make_shared<TransformedDataset>(std::make_shared<ImageFolderSource>(folder, maxPixels), t, imageNetNorm());
  }
  if (name == "cityscapes") {
    APS_CHECK(!spec.root.empty(), "dataset cityscapes needs a root folder");
    const int h = spec.cropSize > 0 ? spec.cropSize : 512;
    const int w = spec.cropSize > 0 ? spec.cropSize : 1024;
    return segmentation(openCityscapes(spec.root, spec.split, maxPixels), spec, h, w, false);
  }
  if (name == "voc") {
    APS_CHECK(!spec.root.empty(), "dataset voc needs a root folder (VOCdevkit/VOC2012)");
    const int size = spec.cropSize > 0 ? spec.cropSize : (spec.augment ? 480 : 512);
    return segmentation(openPascalVoc(spec.root, spec.split, maxPixels), spec, size, size, true);
  }
  if (name == "fashion_mnist_seg") {
    auto base = openFashionMnist(spec.split, spec.root.empty() ? kFashionMnistDir : spec.root);
    Transforms t;
    if (spec.augment) t.push_back(std::make_shared<RandomHorizontalFlip>());
    return std::make_shared<TransformedDataset>(std::make_shared<FashionMnistSegmentation>(
                                                    base, spec.seed, spec.size,
                                                    spec.canvas > 0 ? spec.canvas
                                                                    : FashionMnistSegmentation::kDefaultCanvas,
                                                    spec.maxItems > 0 ? spec.maxItems
                                                                      : FashionMnistSegmentation::kDefaultMaxItems),
                                                t, Normalize({0.2860f}, {0.3530f}));
  }
  APS_FAIL(
      "unknown dataset '{}' (expected fashion_mnist, mnist, cifar10, cifar100, cifar100_coarse, imagenet, "
      "image_folder, cityscapes, voc or fashion_mnist_seg)",
      name);
}

}  // namespace aps::data
