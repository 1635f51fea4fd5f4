#pragma once

#include "data/ExampleSource.h"

#include <string>
#include <vector>

namespace aps::data {

// CIFAR-10 and CIFAR-100 in their binary versions (Krizhevsky 2009,
// https://www.cs.toronto.edu/~kriz/cifar.html). A CIFAR-10 record is 1 label byte then 3072
// pixel bytes (1024 R, 1024 G, 1024 B, row-major 32x32); data_batch_1..5.bin form the
// training set and test_batch.bin the test set. A CIFAR-100 record is a coarse (20 classes)
// and a fine (100 classes) label byte then the same 3072 bytes, in train.bin / test.bin.
class CifarSource final : public ExampleSource {
 public:
  enum class Variant { kCifar10, kCifar100Fine, kCifar100Coarse };

  // dir holds the .bin files (cifar-10-batches-bin/ or cifar-100-binary/); split is "train" or
  // "test"/"val".
  CifarSource(const std::string& dir, const std::string& split, Variant variant);

  int64_t size() const override { return count_; }
  int64_t numClasses() const override { return numClasses_; }
  bool isSegmentation() const override { return false; }
  void read(int64_t index, Example& out) const override;
  std::string describe(int64_t index) const override;

  static constexpr int kSide = 32;
  static constexpr int kPixels = 3 * kSide * kSide;

 private:
  struct FileRange {
    std::string path;
    int64_t first = 0;  // index of the file's first record
  };
  int64_t count_ = 0;
  int64_t numClasses_ = 0;
  std::vector<FileRange> files_;
  std::vector<uint8_t> pixels_;  // (N, 3, 32, 32), as stored
  std::vector<uint8_t> labels_;  // (N)
};

}  // namespace aps::data
