#pragma once

#include "framework/core/Rng.h"

#include <cstdint>
#include <vector>

namespace aps::data {

// The shape of one sample as the loader batches it.
struct SampleShape {
  std::vector<int64_t> image;  // (C, H, W)
  std::vector<int64_t> label;  // () for a class label, (H, W) for a label map

  int64_t imageNumel() const;
  int64_t labelNumel() const;
};

// What the loader reads: a fixed number of samples of one shape. get() must be safe to call
// from several threads at once; it draws augmentation randomness only from rng and writes the
// sample into caller-provided buffers of sampleShape() sizes (labels as int64: a class index,
// or per-pixel class indices with 255 = ignore).
class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual int64_t size() const = 0;
  virtual int64_t numClasses() const = 0;
  virtual SampleShape sampleShape() const = 0;
  virtual void get(int64_t index, Rng& rng, float* image, int64_t* label) const = 0;
};

}  // namespace aps::data
