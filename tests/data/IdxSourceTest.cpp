#include "data/IdxSource.h"
#include "data/MnistFiles.h"
#include "tests/data/DataTestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace aps::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

class IdxFormat : public ::testing::TestWithParam<bool> {};

TEST_P(IdxFormat, ReadsImagesAndLabelsRawOrGzipped) {
  const bool gz = GetParam();
  TempDir dir;
  testing::writeMnistLayout(dir.path().string(), "train", 12, 5, 4, gz);
  testing::writeMnistLayout(dir.path().string(), "t10k", 3, 5, 4, gz);
  const auto train = openMnistLayout(dir.path().string(), "train");
  const auto test = openMnistLayout(dir.path().string(), "test");
  ASSERT_EQ(train->size(), 12);
  ASSERT_EQ(test->size(), 3);
  EXPECT_EQ(train->numClasses(), 10);
  EXPECT_EQ(train->height(), 5);
  EXPECT_EQ(train->width(), 4);
  Example ex;
  train->read(11, ex);
  EXPECT_EQ(ex.label, 1);
  ASSERT_EQ(ex.image.channels, 1);
  ASSERT_EQ(ex.image.height, 5);
  ASSERT_EQ(ex.image.width, 4);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 4; ++x) EXPECT_EQ(ex.image.pixels[static_cast<size_t>(y * 4 + x)], testing::idxPixel(11, y, x));
  EXPECT_TRUE(ex.mask.empty());
  EXPECT_THAT(train->describe(11), HasSubstr("train-images-idx3-ubyte"));
}

INSTANTIATE_TEST_SUITE_P(RawAndGzip, IdxFormat, ::testing::Bool());

TEST(IdxSource, MissingFileNamesThePath) {
  TempDir dir;
  const std::string msg = testing::errorOf([&] { IdxSource(dir / "nope-images", dir / "nope-labels"); });
  EXPECT_THAT(msg, HasSubstr(dir / "nope-images"));
  EXPECT_THAT(msg, HasSubstr("not found"));
}

TEST(IdxSource, MissingFashionMnistSaysWhereAndHowToInstall) {
  TempDir dir;
  const std::string missing = dir / "fashion";
  const std::string msg = testing::errorOf([&] { openFashionMnist("train", missing); });
  EXPECT_THAT(msg, HasSubstr(missing));
  EXPECT_THAT(msg, HasSubstr("apt-get install dataset-fashion-mnist"));
  std::filesystem::create_directories(missing);
  const std::string fileMsg = testing::errorOf([&] { openFashionMnist("test", missing); });
  EXPECT_THAT(fileMsg, HasSubstr("t10k-images-idx3-ubyte.gz"));
  EXPECT_THAT(fileMsg, HasSubstr("apt-get install dataset-fashion-mnist"));
}

TEST(IdxSource, TruncatedRawFileIsAnErrorNamingIt) {
  TempDir dir;
  auto images = testing::idxImages(std::vector<uint8_t>(2 * 9, 7), 2, 3, 3);
  images.resize(images.size() - 1);
  testing::writeBytes(dir / "images", images);
  testing::writeBytes(dir / "labels", testing::idxLabels({1, 2}));
  const std::string msg = testing::errorOf([&] { IdxSource(dir / "images", dir / "labels"); });
  EXPECT_THAT(msg, HasSubstr(dir / "images"));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST(IdxSource, TruncatedGzipStreamIsAnErrorNamingIt) {
  TempDir dir;
  auto gz = testing::gzipBytes(testing::idxImages(std::vector<uint8_t>(50 * 81, 7), 50, 9, 9));
  gz.resize(gz.size() / 2);
  testing::writeBytes(dir / "images.gz", gz);
  testing::writeBytes(dir / "labels", testing::idxLabels(std::vector<uint8_t>(50, 1)));
  const std::string msg = testing::errorOf([&] { IdxSource(dir / "images.gz", dir / "labels"); });
  EXPECT_THAT(msg, HasSubstr(dir / "images.gz"));
}

TEST(IdxSource, WrongMagicNumberIsAnErrorNamingTheFile) {
  TempDir dir;
  testing::writeBytes(dir / "images", testing::idxImages(std::vector<uint8_t>(9, 7), 1, 3, 3));
  testing::writeBytes(dir / "labels", testing::idxLabels({1}));
  // Swapped: a label file where images are expected.
  const std::string msg = testing::errorOf([&] { IdxSource(dir / "labels", dir / "images"); });
  EXPECT_THAT(msg, HasSubstr(dir / "labels"));
  EXPECT_THAT(msg, HasSubstr("magic"));
}

TEST(IdxSource, OutOfRangeLabelIsAnErrorNamingTheFile) {
  TempDir dir;
  testing::writeBytes(dir / "images", testing::idxImages(std::vector<uint8_t>(18, 7), 2, 3, 3));
  testing::writeBytes(dir / "labels", testing::idxLabels({3, 10}));
  const std::string msg = testing::errorOf([&] { IdxSource(dir / "images", dir / "labels"); });
  EXPECT_THAT(msg, HasSubstr(dir / "labels"));
  EXPECT_THAT(msg, HasSubstr("label 10"));
}

TEST(IdxSource, CountMismatchIsAnError) {
  TempDir dir;
  testing::writeBytes(dir / "images", testing::idxImages(std::vector<uint8_t>(18, 7), 2, 3, 3));
  testing::writeBytes(dir / "labels", testing::idxLabels({3}));
  EXPECT_THAT(testing::errorOf([&] { IdxSource(dir / "images", dir / "labels"); }), HasSubstr("mismatch"));
}

}  // namespace
}  // namespace aps::data
