#include "data/FashionMnistSegmentation.h"
#include "data/TransformedDataset.h"
#include "framework/core/Error.h"
#include "tests/data/DataTestFiles.h"

#include <gtest/gtest.h>

#include <set>

namespace aps::data {
namespace {

using testing::TempDir;

// A base of 20 28x28 items, label i % 10: a 200-valued square at rows/cols 4..23, faint (20,
// below the item threshold) elsewhere.
std::shared_ptr<IdxSource> squareItems(const TempDir& dir) {
  std::vector<uint8_t> pixels, labels;
  for (int i = 0; i < 20; ++i) {
    for (int y = 0; y < 28; ++y)
      for (int x = 0; x < 28; ++x) pixels.push_back(y >= 4 && y < 24 && x >= 4 && x < 24 ? 200 : 20);
    labels.push_back(static_cast<uint8_t>(i % 10));
  }
  testing::writeBytes(dir / "images", testing::idxImages(pixels, 20, 28, 28));
  testing::writeBytes(dir / "labels", testing::idxLabels(labels));
  return std::make_shared<IdxSource>(dir / "images", dir / "labels");
}

TEST(FashionMnistSegmentation, LabelsMarkExactlyThePastedItemPixels) {
  TempDir dir;
  const FashionMnistSegmentation seg(squareItems(dir), 7, 300);
  EXPECT_EQ(seg.size(), 300);
  EXPECT_EQ(seg.numClasses(), 11);
  std::set<int> classes;
  for (int64_t i = 0; i < seg.size(); ++i) {
    Example ex;
    seg.read(i, ex);
    ASSERT_EQ(ex.image.height, 64);
    ASSERT_EQ(ex.image.width, 64);
    ASSERT_EQ(ex.image.channels, 1);
    ASSERT_EQ(ex.mask.height, 64);
    int itemPixels = 0;
    for (size_t p = 0; p < ex.mask.labels.size(); ++p) {
      const uint8_t label = ex.mask.labels[p];
      ASSERT_LE(label, 10);
      // Faint pixels (20 <= threshold) are never pasted; squares are 200.
      ASSERT_EQ(ex.image.pixels[p], label == 10 ? 0 : 200);
      itemPixels += label != 10;
      classes.insert(label);
    }
    // 1 to 4 squares of 400 pixels: at least one square, at most 4 (overlaps overwrite).
    ASSERT_GE(itemPixels, 400);
    ASSERT_LE(itemPixels, 1600);
  }
  EXPECT_EQ(classes.size(), 11u);
}

TEST(FashionMnistSegmentation, IsAPureFunctionOfSeedAndIndex) {
  TempDir dir;
  const auto base = squareItems(dir);
  const FashionMnistSegmentation a(base, 7), b(base, 7), c(base, 8);
  EXPECT_EQ(a.size(), 20);
  int differ = 0;
  for (int64_t i = 0; i < 20; ++i) {
    Example x, y, z;
    a.read(i, x);
    b.read(i, y);
    c.read(i, z);
    EXPECT_EQ(x.image.pixels, y.image.pixels);
    EXPECT_EQ(x.mask.labels, y.mask.labels);
    differ += x.mask.labels != z.mask.labels;
  }
  EXPECT_GT(differ, 10);
  const TransformedDataset ds(std::make_shared<FashionMnistSegmentation>(base, 7), {});
  EXPECT_EQ(ds.sampleShape().image, (std::vector<int64_t>{1, 64, 64}));
  EXPECT_EQ(ds.sampleShape().label, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(ds.numClasses(), 11);
}

TEST(FashionMnistSegmentation, CanvasAndItemCountAreParameters) {
  TempDir dir;
  const auto base = squareItems(dir);
  const FashionMnistSegmentation seg(base, 7, 200, 40, 2);
  std::set<int> itemCounts;
  for (int64_t i = 0; i < seg.size(); ++i) {
    Example ex;
    seg.read(i, ex);
    ASSERT_EQ(ex.image.height, 40);
    ASSERT_EQ(ex.image.width, 40);
    ASSERT_EQ(ex.mask.width, 40);
    int itemPixels = 0;
    for (const uint8_t label : ex.mask.labels) itemPixels += label != 10;
    // 1 or 2 squares of 400 pixels; two squares on a 40x40 canvas may overlap.
    ASSERT_GE(itemPixels, 400);
    ASSERT_LE(itemPixels, 800);
    itemCounts.insert(itemPixels > 400 ? 2 : 1);
  }
  EXPECT_EQ(itemCounts, (std::set<int>{1, 2}));
  // The defaults are the 64x64, 1-to-4-item canvases: the same examples as without arguments.
  const FashionMnistSegmentation a(base, 7, 50), b(base, 7, 50, 64, 4);
  for (int64_t i = 0; i < 50; ++i) {
    Example x, y;
    a.read(i, x);
    b.read(i, y);
    ASSERT_EQ(x.mask.labels, y.mask.labels);
  }
  EXPECT_THROW(FashionMnistSegmentation(base, 7, 10, 20, 2), Error);  // a 28x28 item does not fit
  EXPECT_THROW(FashionMnistSegmentation(base, 7, 10, 40, 0), Error);
}

}  // namespace
}  // namespace aps::data
