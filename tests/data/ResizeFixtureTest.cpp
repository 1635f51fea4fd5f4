// Resize against PyTorch's bilinear interpolation with antialiasing (torchvision's tensor
// path); fixture from tools/fixtures/data_resize.py.
#include "data/GeometricTransforms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

namespace aps::data {
namespace {

TEST(ResizeFixture, MatchesTorchBilinear) {
  std::ifstream in(std::string(APS_SOURCE_DIR) + "/tests/fixtures/data/resize_bilinear.bin", std::ios::binary);
  ASSERT_TRUE(in.good());
  int cases = 0;
  int h, w, c, oh, ow;
  while (in >> h >> w >> c >> oh >> ow) {
    in.get();  // the newline
    Example ex;
    ex.image.reshape(h, w, c);
    in.read(reinterpret_cast<char*>(ex.image.pixels.data()), static_cast<std::streamsize>(ex.image.pixels.size()));
    std::vector<uint8_t> expected(static_cast<size_t>(oh) * ow * c);
    in.read(reinterpret_cast<char*>(expected.data()), static_cast<std::streamsize>(expected.size()));
    ASSERT_TRUE(in.good());
    resizeExample(ex, oh, ow);
    ASSERT_EQ(ex.image.height, oh);
    ASSERT_EQ(ex.image.width, ow);
    int maxDiff = 0;
    double sumDiff = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      const int d = std::abs(static_cast<int>(ex.image.pixels[i]) - static_cast<int>(expected[i]));
      maxDiff = std::max(maxDiff, d);
      sumDiff += d;
    }
    const double meanDiff = sumDiff / static_cast<double>(expected.size());
    std::printf("%dx%d -> %dx%d: max |diff| %d, mean %.4f\n", h, w, oh, ow, maxDiff, meanDiff);
    // The same weights and operation order in float; a value within float rounding of .5 may
    // round the other way.
    EXPECT_LE(maxDiff, 1) << h << "x" << w << " -> " << oh << "x" << ow;
    EXPECT_LE(meanDiff, 0.01) << h << "x" << w << " -> " << oh << "x" << ow;
    ++cases;
  }
  EXPECT_EQ(cases, 5);
}

}  // namespace
}  // namespace aps::data
