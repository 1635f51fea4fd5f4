#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace aps::data {

// A decoded image before it becomes floats: 8-bit, interleaved HWC, RGB channel order (or one
// grey channel). Geometric transforms run on these bytes, as torchvision's do on PIL images,
// and only the last step converts to normalised float CHW.
struct Image {
  int height = 0;
  int width = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;  // (H, W, C)

  void reshape(int h, int w, int c) {
    height = h;
    width = w;
    channels = c;
    pixels.resize(static_cast<size_t>(h) * w * c);
  }
  bool empty() const { return pixels.empty(); }
};

// A per-pixel class map for segmentation; kIgnoreLabel marks pixels the loss skips.
struct LabelMap {
  int height = 0;
  int width = 0;
  std::vector<uint8_t> labels;  // (H, W)

  void reshape(int h, int w) {
    height = h;
    width = w;
    labels.resize(static_cast<size_t>(h) * w);
  }
  bool empty() const { return labels.empty(); }
};

// The ignore index of Cityscapes' trainIds, Pascal VOC's object boundaries and PyTorch's
// CrossEntropyLoss(ignore_index=255) recipes for both.
inline constexpr uint8_t kIgnoreLabel = 255;

// One example as a source yields it: an image with either a class label (classification) or a
// label map of the same height and width (segmentation, mask non-empty).
struct Example {
  Image image;
  LabelMap mask;
  int64_t label = -1;
};

}  // namespace aps::data
