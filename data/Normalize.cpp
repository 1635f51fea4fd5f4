#include "data/Normalize.h"

#include "framework/core/Error.h"

#include <array>

namespace aps::data {

Normalize::Normalize(std::vector<float> mean, std::vector<float> stddev)
    : mean_(std::move(mean)), stddev_(std::move(stddev)) {
  APS_CHECK(mean_.size() == stddev_.size(), "Normalize: {} means but {} standard deviations", mean_.size(),
            stddev_.size());
  for (float s : stddev_) APS_CHECK(s > 0, "Normalize: standard deviation {} must be positive", s);
}

void Normalize::apply(const Image& image, float* out) const {
  const int c = image.channels;
  APS_CHECK(mean_.empty() || static_cast<int>(mean_.size()) == c, "Normalize: configured for {} channels, image has {}",
            mean_.size(), c);
  const size_t plane = static_cast<size_t>(image.height) * image.width;
  const uint8_t* src = image.pixels.data();
  for (int ch = 0; ch < c; ++ch) {
    // The same float operations as torchvision ((x / 255 - mean) / std), so values match it bit for bit.
    const float mean = mean_.empty() ? 0.0f : mean_[static_cast<size_t>(ch)];
    const float stddev = stddev_.empty() ? 1.0f : stddev_[static_cast<size_t>(ch)];
    std::array<float, 256> table;
    for (int v = 0; v < 256; ++v) table[static_cast<size_t>(v)] = (static_cast<float>(v) / 255.0f - mean) / stddev;
    float* dst = out + plane * static_cast<size_t>(ch);
    for (size_t p = 0; p < plane; ++p) dst[p] = table[src[p * static_cast<size_t>(c) + static_cast<size_t>(ch)]];
  }
}

}  // namespace aps::data
