#pragma once

#include "data/Example.h"
#include "framework/core/Rng.h"

namespace aps::data {

// One step of a data-augmentation pipeline. It changes the image, and the label map of a
// segmentation example jointly (same geometry; nearest-neighbour for labels, kIgnoreLabel where
// labels are padded), drawing any randomness from `rng`, the sample's own stream
// (sampleRng), so a sample's augmentation is independent of worker count and order.
class Transform {
 public:
  virtual ~Transform() = default;
  virtual void apply(Example& example, Rng& rng) const = 0;
};

}  // namespace aps::data
