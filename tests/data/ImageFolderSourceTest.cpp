#include "data/ImageFolderSource.h"
#include "tests/data/DataTestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

namespace aps::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

TEST(ImageFolderSource, ClassesAreSortedFolderNamesAndPixelsAreRgb) {
  TempDir dir;
  // Created out of order; classes must come out as ant, bee, cat.
  testing::writeRgbImage(dir / "cat/b.png", 6, 8, {10, 20, 30}, {255, 0, 0});
  testing::writeRgbImage(dir / "cat/a.JPEG", 16, 16, {200, 100, 50}, {200, 100, 50});
  testing::writeRgbImage(dir / "ant/x.jpg", 16, 24, {0, 128, 255}, {0, 128, 255});
  testing::writeRgbImage(dir / "bee/y.png", 3, 5, {1, 2, 3}, {4, 5, 6});
  testing::writeBytes(dir / "bee/notes.txt", {'h', 'i'});  // not an image: ignored
  const ImageFolderSource source(dir.path().string());
  ASSERT_EQ(source.numClasses(), 3);
  EXPECT_EQ(source.classNames(), (std::vector<std::string>{"ant", "bee", "cat"}));
  ASSERT_EQ(source.size(), 4);
  EXPECT_EQ(source.path(2), dir / "cat/a.JPEG");  // files sorted by name within a class
  EXPECT_EQ(source.path(3), dir / "cat/b.png");

  Example ex;
  source.read(3, ex);
  EXPECT_EQ(ex.label, 2);
  ASSERT_EQ(ex.image.height, 6);
  ASSERT_EQ(ex.image.width, 8);
  ASSERT_EQ(ex.image.channels, 3);
  // PNG is lossless: exact RGB values, marker red at (0, 0).
  EXPECT_EQ(ex.image.pixels[0], 255);
  EXPECT_EQ(ex.image.pixels[1], 0);
  EXPECT_EQ(ex.image.pixels[2], 0);
  const size_t p = (2 * 8 + 5) * 3;
  EXPECT_EQ(ex.image.pixels[p + 0], 10);
  EXPECT_EQ(ex.image.pixels[p + 1], 20);
  EXPECT_EQ(ex.image.pixels[p + 2], 30);

  source.read(0, ex);  // JPEG at quality 100 of a flat colour: within a few levels
  EXPECT_EQ(ex.label, 0);
  ASSERT_EQ(ex.image.height, 16);
  ASSERT_EQ(ex.image.width, 24);
  const size_t q = (8 * 24 + 12) * 3;
  EXPECT_LE(std::abs(ex.image.pixels[q + 0] - 0), 3);
  EXPECT_LE(std::abs(ex.image.pixels[q + 1] - 128), 3);
  EXPECT_LE(std::abs(ex.image.pixels[q + 2] - 255), 3);
}

TEST(ImageFolderSource, MissingRootNamesThePath) {
  TempDir dir;
  const std::string msg = testing::errorOf([&] { ImageFolderSource(dir / "train"); });
  EXPECT_THAT(msg, HasSubstr(dir / "train"));
  EXPECT_THAT(msg, HasSubstr("not found"));
}

TEST(ImageFolderSource, EmptyClassFolderIsAnErrorNamingIt) {
  TempDir dir;
  testing::writeRgbImage(dir / "a/1.png", 2, 2, {1, 1, 1}, {1, 1, 1});
  std::filesystem::create_directories(dir / "b");
  EXPECT_THAT(testing::errorOf([&] { ImageFolderSource(dir.path().string()); }), HasSubstr(dir / "b"));
}

TEST(ImageFolderSource, UndecodableImageIsAnErrorNamingTheFile) {
  TempDir dir;
  testing::writeRgbImage(dir / "a/good.png", 2, 2, {1, 1, 1}, {1, 1, 1});
  testing::writeBytes(dir / "a/broken.jpg", {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'});
  const ImageFolderSource source(dir.path().string());
  Example ex;
  const std::string msg = testing::errorOf([&] { source.read(0, ex); });
  EXPECT_THAT(msg, HasSubstr(dir / "a/broken.jpg"));
  EXPECT_THAT(msg, HasSubstr("cannot decode"));
}

TEST(ImageFolderSource, TruncatedJpegAndPngAreErrorsNamingTheFile) {
  TempDir dir;
  testing::writeRgbImage(dir / "a/full.jpg", 64, 64, {90, 20, 200}, {1, 2, 3});
  testing::writeRgbImage(dir / "a/full.png", 64, 64, {90, 20, 200}, {1, 2, 3});
  for (const std::string name : {"full.jpg", "full.png"}) {
    std::ifstream in(dir / ("a/" + name), std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes.resize(bytes.size() * 2 / 3);
    testing::writeBytes(dir / ("b/cut_" + name), bytes);
  }
  const ImageFolderSource source(dir.path().string());
  ASSERT_EQ(source.size(), 4);
  Example ex;
  source.read(0, ex);  // the complete ones decode
  source.read(1, ex);
  const std::string jpegMsg = testing::errorOf([&] { source.read(2, ex); });
  EXPECT_THAT(jpegMsg, HasSubstr(dir / "b/cut_full.jpg"));
  EXPECT_THAT(jpegMsg, HasSubstr("truncated"));
  EXPECT_THAT(testing::errorOf([&] { source.read(3, ex); }), HasSubstr(dir / "b/cut_full.png"));
}

}  // namespace
}  // namespace aps::data
