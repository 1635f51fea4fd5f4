#pragma once

#include "data/ExampleSource.h"
#include "data/IdxSource.h"

#include <memory>

namespace aps::data {

// A small, deterministic segmentation task derived from Fashion-MNIST, for testing
// segmentation training without Cityscapes: 1 to 4 Fashion-MNIST items (28x28) are pasted at
// random positions on a black canvas (64x64 by default). Each pixel's label is the class (0-9)
// of the item that covers it, or background (10): 11 classes. The canvas side (at least the
// item's) and the largest number of items are parameters: a 40x40 canvas with 1 to 2 items
// costs a third of the default's compute per image and still has overlapping items.
//
// An "item pixel" is one whose Fashion-MNIST intensity is above kItemThreshold (25 of 255,
// about 10%): only item pixels are pasted, both into the image and the labels, so the labels
// describe exactly what the image shows. Items are pasted in order, later ones overwriting
// earlier ones where they overlap. Example i is a pure function of (seed, i): its first item
// is base item i mod base size (so every item is used), the count, the other items and all
// positions come from a Philox stream keyed by (seed, i).
class FashionMnistSegmentation final : public ExampleSource {
 public:
  static constexpr int kDefaultCanvas = 64;
  static constexpr int kDefaultMaxItems = 4;
  static constexpr int kLargestCanvas = 4096;  // the largest canvas side taken
  static constexpr int kMostItems = 64;        // the largest maxItems taken
  static constexpr uint8_t kItemThreshold = 25;
  static constexpr int64_t kBackground = 10;

  // size <= 0 means as many examples as the base has items. canvas: the side in pixels;
  // maxItems: each example has 1 to maxItems items.
  FashionMnistSegmentation(std::shared_ptr<const IdxSource> base, uint64_t seed, int64_t size = 0,
                           int canvas = kDefaultCanvas, int maxItems = kDefaultMaxItems);

  int64_t size() const override { return size_; }
  int64_t numClasses() const override { return 11; }
  bool isSegmentation() const override { return true; }
  void read(int64_t index, Example& out) const override;
  std::string describe(int64_t index) const override;

 private:
  std::shared_ptr<const IdxSource> base_;
  uint64_t seed_;
  int64_t size_;
  int canvas_, maxItems_;
};

}  // namespace aps::data
