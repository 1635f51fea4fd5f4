#pragma once

#include "data/ExampleSource.h"

#include <string>
#include <vector>

namespace aps::data {

// MNIST-family images in the idx format (LeCun et al., http://yann.lecun.com/exdb/mnist/):
// a big-endian header 0x00000803 N H W followed by N*H*W unsigned bytes, and a label file
// 0x00000801 N followed by N bytes. Either file may be gzipped. Everything is held in memory
// (Fashion-MNIST's training set is 47 MB).
class IdxSource final : public ExampleSource {
 public:
  IdxSource(const std::string& imagesPath, const std::string& labelsPath, int64_t numClasses = 10);

  int64_t size() const override { return count_; }
  int64_t numClasses() const override { return numClasses_; }
  bool isSegmentation() const override { return false; }
  void read(int64_t index, Example& out) const override;
  std::string describe(int64_t index) const override;

  int height() const { return height_; }
  int width() const { return width_; }
  // The raw bytes of image `index` (H*W) and its label, without copying.
  const uint8_t* imageBytes(int64_t index) const { return images_.data() + index * height_ * width_; }
  int64_t labelOf(int64_t index) const { return labels_[static_cast<size_t>(index)]; }

 private:
  std::string imagesPath_;
  int64_t count_ = 0;
  int64_t numClasses_ = 0;
  int height_ = 0;
  int width_ = 0;
  std::vector<uint8_t> images_;  // (N, H, W)
  std::vector<uint8_t> labels_;  // (N)
};

}  // namespace aps::data
