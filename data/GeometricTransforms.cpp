#include "data/GeometricTransforms.h"

#include "data/BilinearResize.h"
#include "framework/core/Error.h"

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace aps::data {

namespace {

cv::Mat matOf(Image& image) { return cv::Mat(image.height, image.width, CV_8UC(image.channels), image.pixels.data()); }
cv::Mat matOf(LabelMap& labels) { return cv::Mat(labels.height, labels.width, CV_8UC1, labels.labels.data()); }

// Python's round(): half to even (std::nearbyint in the default rounding mode).
int roundHalfEven(double x) { return static_cast<int>(std::nearbyint(x)); }

void cropPlane(const uint8_t* src, int srcH, int srcW, int channels, int top, int left, int h, int w, uint8_t fill,
               uint8_t* dst) {
  const size_t rowBytes = static_cast<size_t>(w) * channels;
  for (int y = 0; y < h; ++y) {
    uint8_t* out = dst + static_cast<size_t>(y) * rowBytes;
    const int sy = top + y;
    if (sy < 0 || sy >= srcH) {
      std::memset(out, fill, rowBytes);
      continue;
    }
    const int x0 = std::clamp(-left, 0, w);         // first output column inside the source
    const int x1 = std::clamp(srcW - left, x0, w);  // one past the last
    std::memset(out, fill, static_cast<size_t>(x0) * channels);
    std::memcpy(out + static_cast<size_t>(x0) * channels,
                src + (static_cast<size_t>(sy) * srcW + static_cast<size_t>(left + x0)) * channels,
                static_cast<size_t>(x1 - x0) * channels);
    std::memset(out + static_cast<size_t>(x1) * channels, fill, static_cast<size_t>(w - x1) * channels);
  }
}

}  // namespace

void cropExample(Example& example, int top, int left, int height, int width, uint8_t fill) {
  APS_CHECK(height > 0 && width > 0, "crop: size {}x{} must be positive", height, width);
  thread_local Image image;
  image.reshape(height, width, example.image.channels);
  cropPlane(example.image.pixels.data(), example.image.height, example.image.width, example.image.channels, top, left,
            height, width, fill, image.pixels.data());
  std::swap(example.image, image);
  if (!example.mask.empty()) {
    thread_local LabelMap mask;
    mask.reshape(height, width);
    cropPlane(example.mask.labels.data(), example.mask.height, example.mask.width, 1, top, left, height, width,
              kIgnoreLabel, mask.labels.data());
    std::swap(example.mask, mask);
  }
}

void resizeExample(Example& example, int height, int width) {
  APS_CHECK(height > 0 && width > 0, "resize: size {}x{} must be positive", height, width);
  if (height == example.image.height && width == example.image.width) return;
  thread_local Image image;
  resizeBilinear(example.image, height, width, image);
  std::swap(example.image, image);
  if (!example.mask.empty()) {
    thread_local LabelMap mask;
    mask.reshape(height, width);
    cv::Mat dstMask = matOf(mask);
    cv::resize(matOf(example.mask), dstMask, dstMask.size(), 0, 0, cv::INTER_NEAREST_EXACT);
    std::swap(example.mask, mask);
  }
}

void Resize::apply(Example& example, Rng&) const {
  if (width_ > 0) {
    resizeExample(example, height_, width_);
    return;
  }
  const int h = example.image.height, w = example.image.width;
  const int shortSide = std::min(h, w), longSide = std::max(h, w);
  if (shortSide == height_) return;
  const int newLong = static_cast<int>(static_cast<int64_t>(height_) * longSide / shortSide);
  if (h <= w) {
    resizeExample(example, height_, newLong);
  } else {
    resizeExample(example, newLong, height_);
  }
}

void CenterCrop::apply(Example& example, Rng&) const {
  const int h = example.image.height, w = example.image.width;
  // torchvision pads a too-small image by floor/ceil halves first, then crops at
  // round((size - crop) / 2); both amount to this offset.
  const int top = h >= height_ ? roundHalfEven((h - height_) / 2.0) : -((height_ - h) / 2);
  const int left = w >= width_ ? roundHalfEven((w - width_) / 2.0) : -((width_ - w) / 2);
  cropExample(example, top, left, height_, width_);
}

void RandomCrop::apply(Example& example, Rng& rng) const {
  const int paddedH = std::max(example.image.height + 2 * padding_, height_);
  const int paddedW = std::max(example.image.width + 2 * padding_, width_);
  int top = 0, left = 0;
  if (paddedH != height_ || paddedW != width_) {
    top = static_cast<int>(rng.below(static_cast<uint64_t>(paddedH - height_ + 1)));
    left = static_cast<int>(rng.below(static_cast<uint64_t>(paddedW - width_ + 1)));
  }
  cropExample(example, top - padding_, left - padding_, height_, width_);
}

void RandomHorizontalFlip::apply(Example& example, Rng& rng) const {
  if (!(rng.uniform() < p_)) return;
  cv::Mat image = matOf(example.image);
  cv::flip(image, image, 1);
  if (!example.mask.empty()) {
    cv::Mat mask = matOf(example.mask);
    cv::flip(mask, mask, 1);
  }
}

RandomResizedCrop::RandomResizedCrop(int height, int width, std::pair<double, double> scale,
                                     std::pair<double, double> ratio)
    : height_(height), width_(width), scale_(scale), ratio_(ratio) {
  APS_CHECK(height > 0 && width > 0, "RandomResizedCrop: size {}x{} must be positive", height, width);
  APS_CHECK(scale.first > 0 && scale.first <= scale.second, "RandomResizedCrop: bad scale range ({}, {})", scale.first,
            scale.second);
  APS_CHECK(ratio.first > 0 && ratio.first <= ratio.second, "RandomResizedCrop: bad ratio range ({}, {})", ratio.first,
            ratio.second);
}

RandomResizedCrop::Box RandomResizedCrop::sampleBox(int imageHeight, int imageWidth, Rng& rng) const {
  const double area = static_cast<double>(imageHeight) * imageWidth;
  const double logLo = std::log(ratio_.first), logHi = std::log(ratio_.second);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double targetArea = area * (scale_.first + (scale_.second - scale_.first) * rng.uniformDouble());
    const double aspect = std::exp(logLo + (logHi - logLo) * rng.uniformDouble());
    const int w = roundHalfEven(std::sqrt(targetArea * aspect));
    const int h = roundHalfEven(std::sqrt(targetArea / aspect));
    if (0 < w && w <= imageWidth && 0 < h && h <= imageHeight) {
      const int top = static_cast<int>(rng.below(static_cast<uint64_t>(imageHeight - h + 1)));
      const int left = static_cast<int>(rng.below(static_cast<uint64_t>(imageWidth - w + 1)));
      return {top, left, h, w};
    }
  }
  const double inRatio = static_cast<double>(imageWidth) / imageHeight;
  int w = imageWidth, h = imageHeight;
  if (inRatio < ratio_.first) {
    h = roundHalfEven(w / ratio_.first);
  } else if (inRatio > ratio_.second) {
    w = roundHalfEven(h * ratio_.second);
  }
  return {(imageHeight - h) / 2, (imageWidth - w) / 2, h, w};
}

void RandomResizedCrop::apply(Example& example, Rng& rng) const {
  const Box box = sampleBox(example.image.height, example.image.width, rng);
  cropExample(example, box.top, box.left, box.height, box.width);
  resizeExample(example, height_, width_);
}

RandomScale::RandomScale(double minScale, double maxScale) : min_(minScale), max_(maxScale) {
  APS_CHECK(minScale > 0 && minScale <= maxScale, "RandomScale: bad range ({}, {})", minScale, maxScale);
}

void RandomScale::apply(Example& example, Rng& rng) const {
  const double s = min_ + (max_ - min_) * rng.uniformDouble();
  const int h = std::max(1, roundHalfEven(example.image.height * s));
  const int w = std::max(1, roundHalfEven(example.image.width * s));
  resizeExample(example, h, w);
}

}  // namespace aps::data
