#pragma once

#include "data/Transform.h"

#include <utility>

namespace aps::data {

// The geometric transforms of the torchvision classification recipes and of torchvision's
// segmentation reference (references/segmentation/transforms.py), with torchvision's
// parameter sampling and rounding (Python's round: half to even). Images are resized with
// antialiased bilinear filtering as torchvision does (resizeBilinear, matching PyTorch to
// float rounding). Label maps are resized with nearest-neighbour on pixel centres
// (PIL NEAREST = OpenCV INTER_NEAREST_EXACT) and padded with kIgnoreLabel.

// Resize: with one size, the shorter side becomes `size` and the longer int(size * long /
// short) (torchvision Resize(256)); with two, exactly height x width.
class Resize final : public Transform {
 public:
  explicit Resize(int size) : height_(size), width_(0) {}
  Resize(int height, int width) : height_(height), width_(width) {}
  void apply(Example& example, Rng& rng) const override;

 private:
  int height_;
  int width_;  // 0: resize the shorter side to height_
};

// CenterCrop(size): torchvision's; pads with 0 (labels kIgnoreLabel) when the image is smaller.
class CenterCrop final : public Transform {
 public:
  CenterCrop(int height, int width) : height_(height), width_(width) {}
  explicit CenterCrop(int size) : CenterCrop(size, size) {}
  void apply(Example& example, Rng& rng) const override;

 private:
  int height_;
  int width_;
};

// RandomCrop(size, padding): pads every side by `padding` with 0 (CIFAR's RandomCrop(32, 4)),
// then, where the result is still smaller than the crop, pads bottom and right (the
// segmentation reference's pad_if_smaller: images 0, labels kIgnoreLabel), then crops at a
// uniformly random position (top first, then left, as torchvision draws them).
class RandomCrop final : public Transform {
 public:
  RandomCrop(int height, int width, int padding = 0) : height_(height), width_(width), padding_(padding) {}
  void apply(Example& example, Rng& rng) const override;

 private:
  int height_;
  int width_;
  int padding_;
};

// RandomHorizontalFlip(p): mirrors left-right with probability p.
class RandomHorizontalFlip final : public Transform {
 public:
  explicit RandomHorizontalFlip(float p = 0.5f) : p_(p) {}
  void apply(Example& example, Rng& rng) const override;

 private:
  float p_;
};

// RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) (Szegedy et al., "Going deeper
// with convolutions", 2015, as torchvision implements it): up to 10 tries of an area fraction
// uniform in `scale` and a log-uniform aspect ratio, falling back to a centre crop with the
// ratio clamped; the crop is resized to height x width.
class RandomResizedCrop final : public Transform {
 public:
  RandomResizedCrop(int height, int width, std::pair<double, double> scale = {0.08, 1.0},
                    std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0});
  explicit RandomResizedCrop(int size) : RandomResizedCrop(size, size) {}
  void apply(Example& example, Rng& rng) const override;

  struct Box {
    int top, left, height, width;
  };
  // The crop torchvision's get_params would choose for an image of this size.
  Box sampleBox(int imageHeight, int imageWidth, Rng& rng) const;

 private:
  int height_;
  int width_;
  std::pair<double, double> scale_;
  std::pair<double, double> ratio_;
};

// RandomScale(min, max): scales height and width by one factor uniform in [min, max]
// (rounded to whole pixels), the multi-scale augmentation of segmentation recipes
// (e.g. ratio 0.5-2.0 for Cityscapes).
class RandomScale final : public Transform {
 public:
  RandomScale(double minScale, double maxScale);
  void apply(Example& example, Rng& rng) const override;

 private:
  double min_;
  double max_;
};

// Building blocks shared by the transforms above (and usable on their own).
// Crops the window (top, left, height, width), which may reach outside the image; outside
// pixels become `fill` (images) and kIgnoreLabel (labels).
void cropExample(Example& example, int top, int left, int height, int width, uint8_t fill = 0);
// Resizes image (antialiased bilinear) and labels (nearest) to height x width.
void resizeExample(Example& example, int height, int width);

}  // namespace aps::data
