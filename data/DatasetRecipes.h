#pragma once

#include "data/Dataset.h"

#include <memory>
#include <string>

namespace aps::data {

// What a config names to get a dataset with its standard training or evaluation pipeline.
struct DatasetSpec {
  // fashion_mnist | mnist | cifar10 | cifar100 | cifar100_coarse | imagenet (alias image_folder) |
  // cityscapes | voc | fashion_mnist_seg
  std::string name;
  // The dataset folder; empty for fashion_mnist / fashion_mnist_seg means the Debian package's.
  // imagenet: the folder holding train/ and val/.
  std::string root;
  std::string split = "train";  // train | test | val (voc: any ImageSets/Segmentation list)
  bool augment = true;          // the recipe's random augmentation (normally train only)
  int cropSize = 0;             // 0: the recipe's size (224 ImageNet, 512x1024 Cityscapes, 480 VOC)
  uint64_t seed = 0;            // fashion_mnist_seg: which synthetic set
  int64_t size = 0;             // fashion_mnist_seg: number of examples (0: as many as base items)
  uint64_t maxImagePixels = 0;  // imagenet / cityscapes / voc: the largest image decoded (0: kMaxImagePixels)
  int canvas = 0;               // fashion_mnist_seg: the canvas side (0: 64)
  int maxItems = 0;             // fashion_mnist_seg: at most this many items per canvas (0: 4)
};

// Builds the dataset with the pipeline its usual recipe uses:
//  - (fashion_)mnist: augment = RandomCrop(28, pad 2) (+ flip for Fashion-MNIST); normalised with
//    the training set's mean/std (MNIST 0.1307/0.3081, Fashion-MNIST 0.2860/0.3530);
//  - cifar10/100: augment = RandomCrop(32, pad 4) + flip (He et al. 2016); CIFAR mean/std;
//  - imagenet: augment = RandomResizedCrop(224) + flip, otherwise Resize(256) + CenterCrop(224);
//    ImageNet mean/std (torchvision references/classification);
//  - cityscapes / voc: augment = RandomScale(0.5, 2) + RandomCrop (ignore-filled) + flip,
//    otherwise full images (Cityscapes) or a 512 centre pad/crop (VOC, images are at most
//    500x500); ImageNet mean/std for pretrained backbones;
//  - fashion_mnist_seg: canvases of 64x64 or spec.canvas (FashionMnistSegmentation), augment = flip.
// Throws aps::Error naming the dataset, key or path when something is wrong.
std::shared_ptr<const Dataset> makeDataset(const DatasetSpec& spec);

}  // namespace aps::data
