#include "data/BilinearResize.h"

#include "framework/core/Error.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace aps::data {

namespace {

// Filter taps of every output position along one axis (PyTorch's _compute_weights_aa,
// UpSampleKernel.cpp): output i reads input [first[i], first[i] + count[i]).
struct AxisTaps {
  std::vector<int> first;
  std::vector<int> count;
  std::vector<float> weights;  // maxTaps per output
  int maxTaps = 0;
};

AxisTaps computeTaps(int inSize, int outSize) {
  const float scale = static_cast<float>(inSize) / static_cast<float>(outSize);
  const float support = scale >= 1.0f ? scale : 1.0f;  // bilinear: interp_size / 2 = 1
  const float invScale = scale >= 1.0f ? 1.0f / scale : 1.0f;
  AxisTaps taps;
  taps.maxTaps = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.first.resize(static_cast<size_t>(outSize));
  taps.count.resize(static_cast<size_t>(outSize));
  taps.weights.assign(static_cast<size_t>(outSize) * taps.maxTaps, 0.0f);
  for (int i = 0; i < outSize; ++i) {
    const float center = scale * (static_cast<float>(i) + 0.5f);
    const int xmin = std::max(static_cast<int>(center - support + 0.5f), 0);
    const int xsize = std::min(std::min(static_cast<int>(center + support + 0.5f), inSize) - xmin, taps.maxTaps);
    float* w = &taps.weights[static_cast<size_t>(i) * taps.maxTaps];
    float total = 0.0f;
    for (int j = 0; j < xsize; ++j) {
      const float x = (static_cast<float>(j + xmin) - center + 0.5f) * invScale;
      w[j] = std::max(0.0f, 1.0f - std::abs(x));
      total += w[j];
    }
    if (total != 0.0f) {
      for (int j = 0; j < xsize; ++j) w[j] /= total;
    }
    taps.first[static_cast<size_t>(i)] = xmin;
    taps.count[static_cast<size_t>(i)] = xsize;
  }
  return taps;
}

}  // namespace

void resizeBilinear(const Image& in, int height, int width, Image& out) {
  APS_CHECK(height > 0 && width > 0, "resize: size {}x{} must be positive", height, width);
  APS_CHECK(in.height > 0 && in.width > 0, "resize: empty input image");
  const int c = in.channels;
  const AxisTaps horizontal = computeTaps(in.width, width);
  const AxisTaps vertical = computeTaps(in.height, height);

  // Width first: (in.height, width, c) floats.
  thread_local std::vector<float> rows;
  rows.resize(static_cast<size_t>(in.height) * width * c);
  for (int y = 0; y < in.height; ++y) {
    const uint8_t* src = in.pixels.data() + static_cast<size_t>(y) * in.width * c;
    float* dst = rows.data() + static_cast<size_t>(y) * width * c;
    for (int x = 0; x < width; ++x) {
      const float* w = &horizontal.weights[static_cast<size_t>(x) * horizontal.maxTaps];
      const uint8_t* s = src + static_cast<size_t>(horizontal.first[static_cast<size_t>(x)]) * c;
      const int n = horizontal.count[static_cast<size_t>(x)];
      for (int ch = 0; ch < c; ++ch) {
        float t = static_cast<float>(s[ch]) * w[0];
        for (int j = 1; j < n; ++j) t += static_cast<float>(s[static_cast<size_t>(j) * c + ch]) * w[j];
        dst[static_cast<size_t>(x) * c + ch] = t;
      }
    }
  }
  // Then height, rounding half-to-even (torch.round) and clamping to bytes.
  out.reshape(height, width, c);
  const size_t rowFloats = static_cast<size_t>(width) * c;
  thread_local std::vector<float> acc;
  acc.resize(rowFloats);
  for (int y = 0; y < height; ++y) {
    const float* w = &vertical.weights[static_cast<size_t>(y) * vertical.maxTaps];
    const float* s = rows.data() + static_cast<size_t>(vertical.first[static_cast<size_t>(y)]) * rowFloats;
    const int n = vertical.count[static_cast<size_t>(y)];
    // Row by row (vectorises); each element still sums its taps in order j = 0, 1, ...
    for (size_t k = 0; k < rowFloats; ++k) acc[k] = s[k] * w[0];
    for (int j = 1; j < n; ++j) {
      const float* sj = s + static_cast<size_t>(j) * rowFloats;
      const float wj = w[j];
      for (size_t k = 0; k < rowFloats; ++k) acc[k] += sj[k] * wj;
    }
    uint8_t* dst = out.pixels.data() + static_cast<size_t>(y) * rowFloats;
    for (size_t k = 0; k < rowFloats; ++k)
      dst[k] = static_cast<uint8_t>(std::clamp(std::nearbyint(acc[k]), 0.0f, 255.0f));
  }
}

}  // namespace aps::data
