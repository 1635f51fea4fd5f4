#pragma once

#include "data/Example.h"

#include <vector>

namespace aps::data {

// The last step of every pipeline, torchvision's ToTensor + Normalize(mean, std): 8-bit HWC
// becomes float CHW, x' = (x / 255 - mean[c]) / std[c]. An empty mean/std leaves x / 255.
class Normalize {
 public:
  Normalize() = default;
  Normalize(std::vector<float> mean, std::vector<float> stddev);

  // Writes image into out (channels x height x width floats).
  void apply(const Image& image, float* out) const;
  // Channels this normalisation is for (0: any).
  int channels() const { return static_cast<int>(mean_.size()); }
  const std::vector<float>& mean() const { return mean_; }
  const std::vector<float>& stddev() const { return stddev_; }

 private:
  std::vector<float> mean_;
  std::vector<float> stddev_;
};

}  // namespace aps::data
