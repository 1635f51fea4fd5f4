#pragma once

#include <cstdint>
#include <vector>

namespace aps::data {

// One mini-batch, contiguous and ready to wrap in tensors.
struct Batch {
  std::vector<float> images;        // (N, C, H, W), normalised
  std::vector<int64_t> imageShape;  // {N, C, H, W}
  std::vector<int64_t> labels;      // (N) class indices or (N, H, W) per-pixel classes, 255 = ignore
  std::vector<int64_t> labelShape;  // {N} or {N, H, W}
  std::vector<int64_t> indices;     // (N) the dataset index of each sample

  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

}  // namespace aps::data
