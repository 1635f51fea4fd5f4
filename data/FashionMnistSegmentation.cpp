#include "data/FashionMnistSegmentation.h"

#include "data/SampleRng.h"
#include "framework/core/Error.h"

#include <algorithm>

namespace aps::data {

FashionMnistSegmentation::FashionMnistSegmentation(std::shared_ptr<const IdxSource> base, uint64_t seed, int64_t size,
                                                   int canvas, int maxItems)
    : base_(std::move(base)),
      seed_(seed),
      size_(size > 0 ? size : (base_ ? base_->size() : 0)),
      canvas_(canvas),
      maxItems_(maxItems) {
  APS_CHECK(base_ != nullptr && base_->size() > 0, "Fashion-MNIST segmentation needs a non-empty base dataset");
  APS_CHECK(canvas_ <= kLargestCanvas, "Fashion-MNIST segmentation: a canvas of {}x{} is too large (at most {})",
            canvas_, canvas_, kLargestCanvas);
  APS_CHECK(base_->height() <= canvas_ && base_->width() <= canvas_,
            "Fashion-MNIST segmentation: items of {}x{} do not fit the {}x{} canvas", base_->height(), base_->width(),
            canvas_, canvas_);
  APS_CHECK(maxItems_ >= 1 && maxItems_ <= kMostItems, "Fashion-MNIST segmentation: max items {} is not in [1, {}]",
            maxItems_, kMostItems);
  APS_CHECK(base_->numClasses() <= kBackground, "Fashion-MNIST segmentation: base has {} classes, at most {} allowed",
            base_->numClasses(), kBackground);
}

void FashionMnistSegmentation::read(int64_t index, Example& out) const {
  APS_CHECK(index >= 0 && index < size_, "Fashion-MNIST segmentation index {} out of range [0, {})", index, size_);
  out.image.reshape(canvas_, canvas_, 1);
  out.mask.reshape(canvas_, canvas_);
  std::fill(out.image.pixels.begin(), out.image.pixels.end(), uint8_t{0});
  std::fill(out.mask.labels.begin(), out.mask.labels.end(), static_cast<uint8_t>(kBackground));
  out.label = -1;

  Rng rng(deriveKey(seed_, RngPurpose::kSynthesis, static_cast<uint64_t>(index), 0));
  const int64_t baseSize = base_->size();
  const int itemH = base_->height(), itemW = base_->width();
  const int items = 1 + static_cast<int>(rng.below(static_cast<uint64_t>(maxItems_)));
  for (int k = 0; k < items; ++k) {
    const int64_t item = k == 0 ? index % baseSize : static_cast<int64_t>(rng.below(static_cast<uint64_t>(baseSize)));
    const int top = static_cast<int>(rng.below(static_cast<uint64_t>(canvas_ - itemH + 1)));
    const int left = static_cast<int>(rng.below(static_cast<uint64_t>(canvas_ - itemW + 1)));
    const uint8_t cls = static_cast<uint8_t>(base_->labelOf(item));
    const uint8_t* src = base_->imageBytes(item);
    for (int y = 0; y < itemH; ++y) {
      for (int x = 0; x < itemW; ++x) {
        const uint8_t v = src[y * itemW + x];
        if (v <= kItemThreshold) continue;
        const size_t at = static_cast<size_t>(top + y) * static_cast<size_t>(canvas_) + static_cast<size_t>(left + x);
        out.image.pixels[at] = v;
        out.mask.labels[at] = cls;
      }
    }
  }
}

std::string FashionMnistSegmentation::describe(int64_t index) const {
  return "Fashion-MNIST segmentation example " + std::to_string(index) + " (seed " + std::to_string(seed_) + ")";
}

}  // namespace aps::data
