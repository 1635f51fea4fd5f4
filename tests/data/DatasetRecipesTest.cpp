#include "data/DatasetRecipes.h"
#include "framework/core/Error.h"
#include "tests/data/DataTestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace aps::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using Shape = std::vector<int64_t>;

TEST(DatasetRecipes, ImageFolderTrainAndValPipelinesGiveFixedSizes) {
  TempDir dir;
  testing::writeRgbImage(dir / "train/n01/a.JPEG", 60, 90, {50, 60, 70}, {1, 2, 3});
  testing::writeRgbImage(dir / "train/n02/b.png", 41, 33, {50, 60, 70}, {1, 2, 3});
  testing::writeRgbImage(dir / "val/n01/c.JPEG", 70, 50, {50, 60, 70}, {1, 2, 3});
  testing::writeRgbImage(dir / "val/n02/d.JPEG", 35, 37, {50, 60, 70}, {1, 2, 3});
  const auto train = makeDataset({.name = "imagenet", .root = dir.path().string(), .split = "train", .cropSize = 32});
  const auto val =
      makeDataset({.name = "imagenet", .root = dir.path().string(), .split = "val", .augment = false, .cropSize = 32});
  EXPECT_EQ(train->numClasses(), 2);
  EXPECT_EQ(train->sampleShape().image, (Shape{3, 32, 32}));
  EXPECT_EQ(val->sampleShape().image, (Shape{3, 32, 32}));
  std::vector<float> image(3 * 32 * 32);
  int64_t label = -1;
  for (int64_t i = 0; i < 2; ++i) {
    Rng rng(i);
    train->get(i, rng, image.data(), &label);
    EXPECT_EQ(label, i);
    val->get(i, rng, image.data(), &label);
    // Flat colour: every value is (50/255 - 0.485) / 0.229 in channel 0, up to JPEG error.
    EXPECT_NEAR(image[500], (50 / 255.0f - 0.485f) / 0.229f, 0.1f);
  }
}

TEST(DatasetRecipes, CifarAndFashionMnistSegmentation) {
  TempDir dir;
  testing::writeBytes(dir / "test_batch.bin", testing::cifarRecords(0, 4, {{1}, {2}, {3}, {4}}));
  const auto cifar = makeDataset({.name = "cifar10", .root = dir.path().string(), .split = "test", .augment = false});
  EXPECT_EQ(cifar->size(), 4);
  EXPECT_EQ(cifar->sampleShape().image, (Shape{3, 32, 32}));
  EXPECT_TRUE(cifar->sampleShape().label.empty());

  testing::writeMnistLayout(dir.path().string(), "t10k", 5, 28, 28, true);
  const auto seg = makeDataset({.name = "fashion_mnist_seg", .root = dir.path().string(), .split = "test", .size = 9});
  EXPECT_EQ(seg->size(), 9);
  EXPECT_EQ(seg->numClasses(), 11);
  EXPECT_EQ(seg->sampleShape().image, (Shape{1, 64, 64}));
  EXPECT_EQ(seg->sampleShape().label, (Shape{64, 64}));
}

TEST(DatasetRecipes, UnknownNameAndMissingDataAreNamed) {
  EXPECT_THAT(testing::errorOf([] { makeDataset({.name = "imagenet22k", .root = "/x"}); }),
              HasSubstr("unknown dataset 'imagenet22k'"));
  TempDir dir;
  const std::string msg = testing::errorOf([&] { makeDataset({.name = "fashion_mnist", .root = dir / "none"}); });
  EXPECT_THAT(msg, HasSubstr(dir / "none"));
  EXPECT_THAT(msg, HasSubstr("apt-get install dataset-fashion-mnist"));
  EXPECT_THAT(testing::errorOf([&] { makeDataset({.name = "cityscapes", .root = dir.path().string()}); }),
              HasSubstr(dir / "leftImg8bit/train"));
}

}  // namespace
}  // namespace aps::data
