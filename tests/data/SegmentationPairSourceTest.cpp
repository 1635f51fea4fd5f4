#include "data/SegmentationPairSource.h"
#include "tests/data/DataTestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

namespace aps::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

// A trainId map whose pixel (y, x) holds (y * w + x) % 19, with the last pixel 255 (ignore).
cv::Mat trainIds(int h, int w) {
  cv::Mat m(h, w, CV_8UC1);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) m.at<uint8_t>(y, x) = static_cast<uint8_t>((y * w + x) % 19);
  m.at<uint8_t>(h - 1, w - 1) = kIgnoreLabel;
  return m;
}

void writeCityscapesPair(const TempDir& dir, const std::string& split, const std::string& city, const std::string& stem,
                         int h, int w) {
  testing::writeRgbImage(dir / ("leftImg8bit/" + split + "/" + city + "/" + stem + "_leftImg8bit.png"), h, w,
                         {90, 60, 30}, {1, 2, 3});
  testing::writeGreyPng(dir / ("gtFine/" + split + "/" + city + "/" + stem + "_gtFine_labelTrainIds.png"),
                        trainIds(h, w));
}

TEST(Cityscapes, PairsImagesWithTrainIdLabelsInSortedOrder) {
  TempDir dir;
  writeCityscapesPair(dir, "train", "zurich", "zurich_000000_000019", 4, 6);
  writeCityscapesPair(dir, "train", "aachen", "aachen_000001_000019", 5, 7);
  writeCityscapesPair(dir, "train", "aachen", "aachen_000000_000019", 4, 6);
  writeCityscapesPair(dir, "val", "lindau", "lindau_000000_000019", 4, 6);
  const auto train = openCityscapes(dir.path().string(), "train");
  ASSERT_EQ(train->size(), 3);
  EXPECT_EQ(train->numClasses(), 19);
  EXPECT_TRUE(train->isSegmentation());
  EXPECT_THAT(train->pair(0).image, HasSubstr("aachen_000000_000019_leftImg8bit.png"));
  EXPECT_THAT(train->pair(1).labels, HasSubstr("aachen_000001_000019_gtFine_labelTrainIds.png"));
  EXPECT_THAT(train->pair(2).image, HasSubstr("zurich"));
  EXPECT_EQ(openCityscapes(dir.path().string(), "val")->size(), 1);

  Example ex;
  train->read(1, ex);
  ASSERT_EQ(ex.image.height, 5);
  ASSERT_EQ(ex.image.width, 7);
  ASSERT_EQ(ex.mask.height, 5);
  ASSERT_EQ(ex.mask.width, 7);
  EXPECT_EQ(ex.image.pixels[0], 1);  // marker, RGB order
  EXPECT_EQ(ex.image.pixels[2], 3);
  EXPECT_EQ(ex.image.pixels[3], 90);
  const cv::Mat expected = trainIds(5, 7);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 7; ++x) EXPECT_EQ(ex.mask.labels[static_cast<size_t>(y * 7 + x)], expected.at<uint8_t>(y, x));
  EXPECT_EQ(ex.mask.labels.back(), kIgnoreLabel);
}

TEST(Cityscapes, MissingLabelFileIsNamed) {
  TempDir dir;
  writeCityscapesPair(dir, "train", "bonn", "bonn_000000_000019", 4, 6);
  const std::string label = dir / "gtFine/train/bonn/bonn_000000_000019_gtFine_labelTrainIds.png";
  std::filesystem::remove(label);
  EXPECT_THAT(testing::errorOf([&] { openCityscapes(dir.path().string(), "train"); }), HasSubstr(label));
  EXPECT_THAT(testing::errorOf([&] { openCityscapes(dir.path().string(), "test"); }),
              HasSubstr(dir / "leftImg8bit/test"));
}

TEST(Cityscapes, OutOfRangeLabelAndSizeMismatchNameTheFile) {
  TempDir dir;
  writeCityscapesPair(dir, "train", "bonn", "bonn_000000_000019", 4, 6);
  writeCityscapesPair(dir, "train", "bonn", "bonn_000001_000019", 4, 6);
  const std::string badLabel = dir / "gtFine/train/bonn/bonn_000000_000019_gtFine_labelTrainIds.png";
  cv::Mat ids = trainIds(4, 6);
  ids.at<uint8_t>(1, 2) = 19;  // one past the 19 train classes
  testing::writeGreyPng(badLabel, ids);
  testing::writeGreyPng(dir / "gtFine/train/bonn/bonn_000001_000019_gtFine_labelTrainIds.png", trainIds(3, 6));
  const auto source = openCityscapes(dir.path().string(), "train");
  Example ex;
  const std::string msg = testing::errorOf([&] { source->read(0, ex); });
  EXPECT_THAT(msg, HasSubstr(badLabel));
  EXPECT_THAT(msg, HasSubstr("label 19 at pixel (2, 1)"));
  EXPECT_THAT(testing::errorOf([&] { source->read(1, ex); }), HasSubstr("size mismatch"));
}

std::vector<cv::Vec3b> vocPalette() {
  std::vector<cv::Vec3b> palette(256);
  for (int i = 0; i < 256; ++i) vocPaletteColour(i, &palette[static_cast<size_t>(i)][0]);
  return palette;
}

TEST(PascalVoc, DecodesIndexedPngLabelsThroughThePalette) {
  uint8_t rgb[3];
  vocPaletteColour(15, rgb);  // person: (192, 128, 128) in the devkit
  EXPECT_EQ(rgb[0], 192);
  EXPECT_EQ(rgb[1], 128);
  EXPECT_EQ(rgb[2], 128);
  vocPaletteColour(255, rgb);  // boundary: (224, 224, 192)
  EXPECT_EQ(rgb[0], 224);
  EXPECT_EQ(rgb[1], 224);
  EXPECT_EQ(rgb[2], 192);

  TempDir dir;
  cv::Mat labels(5, 8, CV_8UC1);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 8; ++x) labels.at<uint8_t>(y, x) = static_cast<uint8_t>((x + y * 8) % 21);
  labels.at<uint8_t>(4, 7) = kIgnoreLabel;
  testing::writePalettePng(dir / "SegmentationClass/2007_000032.png", labels, vocPalette());
  testing::writeRgbImage(dir / "JPEGImages/2007_000032.jpg", 5, 8, {128, 128, 128}, {128, 128, 128});
  testing::writeGreyPng(dir / "SegmentationClass/2007_000033.png", labels);  // plain index PNG
  testing::writeRgbImage(dir / "JPEGImages/2007_000033.jpg", 5, 8, {128, 128, 128}, {128, 128, 128});
  testing::writeBytes(dir / "ImageSets/Segmentation/train.txt",
                      {'2', '0', '0', '7', '_', '0', '0', '0', '0', '3', '2', '\n',
                       '2', '0', '0', '7', '_', '0', '0', '0', '0', '3', '3', '\n'});
  const auto voc = openPascalVoc(dir.path().string(), "train");
  ASSERT_EQ(voc->size(), 2);
  EXPECT_EQ(voc->numClasses(), 21);
  for (int64_t i = 0; i < 2; ++i) {
    Example ex;
    voc->read(i, ex);
    ASSERT_EQ(ex.mask.height, 5);
    ASSERT_EQ(ex.mask.width, 8);
    ASSERT_EQ(ex.image.height, 5);
    for (int y = 0; y < 5; ++y)
      for (int x = 0; x < 8; ++x)
        EXPECT_EQ(ex.mask.labels[static_cast<size_t>(y * 8 + x)], labels.at<uint8_t>(y, x)) << i << " " << y << x;
  }
  EXPECT_THAT(testing::errorOf([&] { openPascalVoc(dir.path().string(), "val"); }),
              HasSubstr(dir / "ImageSets/Segmentation/val.txt"));
}

TEST(PascalVoc, ColourOutsideThePaletteAndOutOfRangeIndexNameTheFile) {
  TempDir dir;
  testing::writeRgbImage(dir / "JPEGImages/a.jpg", 4, 4, {1, 1, 1}, {1, 1, 1});
  testing::writeRgbImage(dir / "SegmentationClass/a.png", 4, 4, {0, 0, 0}, {1, 2, 3});  // (1,2,3): not VOC
  testing::writeRgbImage(dir / "JPEGImages/b.jpg", 4, 4, {1, 1, 1}, {1, 1, 1});
  testing::writePalettePng(dir / "SegmentationClass/b.png", cv::Mat(4, 4, CV_8UC1, cv::Scalar(21)), vocPalette());
  testing::writeBytes(dir / "ImageSets/Segmentation/train.txt", {'a', '\n', 'b', '\n'});
  const auto voc = openPascalVoc(dir.path().string(), "train");
  Example ex;
  const std::string colourMsg = testing::errorOf([&] { voc->read(0, ex); });
  EXPECT_THAT(colourMsg, HasSubstr(dir / "SegmentationClass/a.png"));
  EXPECT_THAT(colourMsg, HasSubstr("outside the VOC palette"));
  const std::string rangeMsg = testing::errorOf([&] { voc->read(1, ex); });
  EXPECT_THAT(rangeMsg, HasSubstr(dir / "SegmentationClass/b.png"));
  EXPECT_THAT(rangeMsg, HasSubstr("label 21"));
  std::filesystem::remove(dir / "JPEGImages/b.jpg");
  EXPECT_THAT(testing::errorOf([&] { openPascalVoc(dir.path().string(), "train"); }),
              HasSubstr(dir / "JPEGImages/b.jpg"));
}

}  // namespace
}  // namespace aps::data
