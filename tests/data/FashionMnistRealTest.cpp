// Reads the real Fashion-MNIST from Debian's dataset-fashion-mnist package when installed.
#include "data/FashionMnistSegmentation.h"
#include "data/Loader.h"
#include "data/MnistFiles.h"
#include "data/TransformedDataset.h"

#include "tests/common/Datasets.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

namespace aps::data {
namespace {

TEST(FashionMnistReal, HasTheKnownSizesLabelsAndPixels) {
  APS_REQUIRE_FASHION_MNIST();
  const auto train = openFashionMnist("train");
  const auto test = openFashionMnist("test");
  ASSERT_EQ(train->size(), 60000);
  ASSERT_EQ(test->size(), 10000);
  EXPECT_EQ(train->height(), 28);
  EXPECT_EQ(train->width(), 28);
  // The first item of each split is an ankle boot (class 9); pixel sums checked with Python's gzip.
  EXPECT_EQ(train->labelOf(0), 9);
  EXPECT_EQ(test->labelOf(0), 9);
  EXPECT_EQ(std::accumulate(train->imageBytes(0), train->imageBytes(0) + 784, 0), 76247);
  EXPECT_EQ(std::accumulate(test->imageBytes(0), test->imageBytes(0) + 784, 0), 33456);
  std::vector<int> trainCounts(10), testCounts(10);
  for (int64_t i = 0; i < train->size(); ++i) ++trainCounts[static_cast<size_t>(train->labelOf(i))];
  for (int64_t i = 0; i < test->size(); ++i) ++testCounts[static_cast<size_t>(test->labelOf(i))];
  EXPECT_EQ(trainCounts, std::vector<int>(10, 6000));  // balanced classes
  EXPECT_EQ(testCounts, std::vector<int>(10, 1000));

  // The whole test set through the loader, normalised.
  auto dataset = std::make_shared<TransformedDataset>(test, std::vector<std::shared_ptr<const Transform>>{},
                                                      Normalize({0.2860f}, {0.3530f}));
  Loader loader(dataset, {.batchSize = 1000, .workers = 2, .prefetch = 2, .dropLast = false, .seed = 0});
  std::vector<int64_t> all(10000);
  std::iota(all.begin(), all.end(), 0);
  loader.startEpoch(0, all);
  Batch b;
  double sum = 0;
  int64_t n = 0;
  while (loader.next(b)) {
    for (float v : b.images) sum += v;
    n += static_cast<int64_t>(b.images.size());
  }
  EXPECT_EQ(n, 10000 * 784);
  EXPECT_NEAR(sum / static_cast<double>(n), 0.0, 0.03);  // the mean 0.2860 is for the training set
}

TEST(FashionMnistReal, SegmentationOfRealItems) {
  APS_REQUIRE_FASHION_MNIST();
  const FashionMnistSegmentation seg(openFashionMnist("test"), 1);
  EXPECT_EQ(seg.size(), 10000);
  for (int64_t i = 0; i < 100; ++i) {
    Example ex;
    seg.read(i, ex);
    int item = 0;
    for (size_t p = 0; p < ex.mask.labels.size(); ++p) {
      ASSERT_EQ(ex.mask.labels[p] == FashionMnistSegmentation::kBackground, ex.image.pixels[p] == 0);
      if (ex.mask.labels[p] != FashionMnistSegmentation::kBackground) {
        ASSERT_GT(ex.image.pixels[p], FashionMnistSegmentation::kItemThreshold);
        ++item;
      }
    }
    ASSERT_GT(item, 0);
  }
}

}  // namespace
}  // namespace aps::data
