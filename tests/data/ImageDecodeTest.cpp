#include "data/DatasetRecipes.h"
#include "data/ImageDecode.h"
#include "data/ImageFolderSource.h"
#include "tests/data/DataTestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <opencv2/imgcodecs.hpp>

#include <fstream>
#include <iterator>

namespace aps::data {
namespace {

using ::testing::HasSubstr;
using testing::errorOf;
using testing::TempDir;

std::vector<uint8_t> readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::vector<uint8_t> encode(const std::string& ext, const cv::Mat& image, const std::vector<int>& params) {
  std::vector<uint8_t> bytes;
  if (!cv::imencode(ext, image, bytes, params)) throw std::runtime_error("cannot encode " + ext);
  return bytes;
}

// The fuzzer's 291-byte input (tests/fuzz/corpus/image/regression-slow-progressive-jpeg-291-bytes:
// the harness's mode byte, then a progressive JPEG) declares 4589 x 10859 pixels; libjpeg would
// fill the missing scan data with zeros and decode all 50 million (20 s under the sanitizers).
// It is refused from its header, as an image and as a label map, naming the file.
TEST(ImageDecode, SlowProgressiveJpegIsRefusedAsOutOfProportion) {
  TempDir dir;
  std::vector<uint8_t> bytes =
      readAll(std::string(APS_SOURCE_DIR) + "/tests/fuzz/corpus/image/regression-slow-progressive-jpeg-291-bytes");
  ASSERT_EQ(bytes.size(), 291u);
  bytes.erase(bytes.begin());
  const std::string path = dir / "slow.jpg";
  testing::writeBytes(path, bytes);
  Image image;
  const std::string msg = errorOf([&] { decodeImageFile(path, image); });
  EXPECT_THAT(msg, HasSubstr(path + ": image size 4589x10859 is out of proportion to the file's 290 bytes"));
  LabelMap labels;
  EXPECT_THAT(errorOf([&] { decodeLabelFile(path, LabelEncoding::kVocPalette, 21, labels); }),
              HasSubstr(path + ": image size 4589x10859 is out of proportion"));
}

// A real PNG whose IHDR is rewritten to declare 3000 x 3000 8-bit grey pixels: 9 MB of
// scanlines cannot come out of a few hundred bytes of deflate (at most 1032 bytes a byte).
TEST(ImageDecode, PngHeaderDeclaringMoreThanDeflateCanHoldIsRefused) {
  TempDir dir;
  std::vector<uint8_t> png = encode(".png", cv::Mat(16, 16, CV_8UC1, cv::Scalar(7)), {});
  ASSERT_LT(png.size(), 8000u);
  for (int i = 0; i < 2; ++i) {  // width, then height, big-endian at offsets 16 and 20
    png[16 + 4 * i + 2] = 3000 >> 8;
    png[16 + 4 * i + 3] = 3000 & 0xFF;
  }
  const std::string path = dir / "big.png";
  testing::writeBytes(path, png);
  LabelMap labels;
  EXPECT_THAT(errorOf([&] { decodeLabelFile(path, LabelEncoding::kIndex, 19, labels); }),
              HasSubstr(path + ": image size 3000x3000 is out of proportion to the file's " +
                        std::to_string(png.size()) + " bytes"));
}

// The most compressible real images, blank ones written as tightly as the encoders can (JPEG:
// progressive with optimised Huffman tables, one bit a block in the DC scan; PNG: bilevel and
// 8-bit at zlib level 9), stay inside the bounds and decode: the rule refuses no real file.
TEST(ImageDecode, BlankImagesAtTheEncodersTightestSettingsStillDecode) {
  TempDir dir;
  const cv::Mat grey(2048, 2048, CV_8UC1, cv::Scalar(0));
  const cv::Mat colour(1024, 1024, CV_8UC3, cv::Scalar(255, 255, 255));
  const std::vector<int> tightJpeg = {cv::IMWRITE_JPEG_PROGRESSIVE, 1, cv::IMWRITE_JPEG_OPTIMIZE, 1,
                                      cv::IMWRITE_JPEG_QUALITY, 10};
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    int64_t pixels;
  };
  const std::vector<Case> cases = {
      {"grey-progressive.jpg", encode(".jpg", grey, tightJpeg), 2048 * 2048},
      {"colour-progressive.jpg", encode(".jpg", colour, tightJpeg), 1024 * 1024},
      {"colour-baseline.jpg", encode(".jpg", colour, {cv::IMWRITE_JPEG_OPTIMIZE, 1}), 1024 * 1024},
      {"bilevel.png", encode(".png", grey, {cv::IMWRITE_PNG_BILEVEL, 1, cv::IMWRITE_PNG_COMPRESSION, 9}), 2048 * 2048},
      {"grey.png", encode(".png", grey, {cv::IMWRITE_PNG_COMPRESSION, 9}), 2048 * 2048},
  };
  for (const Case& c : cases) {
    const std::string path = dir / c.name;
    testing::writeBytes(path, c.bytes);
    Image image;
    decodeImageFile(path, image);
    EXPECT_EQ(int64_t{image.width} * image.height, c.pixels) << c.name << ", " << c.bytes.size() << " bytes";
  }
}

// A dataset's own pixel limit (data.max_image_pixels) refuses a larger image by name; the
// decoder's limit still bounds a larger request.
TEST(ImageDecode, DatasetPixelLimitRefusesLargerImages) {
  TempDir dir;
  testing::writeRgbImage(dir / "train/cat/a.png", 40, 50, {1, 2, 3}, {4, 5, 6});
  Example example;
  ImageFolderSource(dir / "train", 2000).read(0, example);
  EXPECT_EQ(example.image.width, 50);
  const std::string msg = errorOf([&] { ImageFolderSource(dir / "train", 1999).read(0, example); });
  EXPECT_THAT(msg, HasSubstr(dir / "train/cat/a.png" + ": image size 50x40 exceeds the 1999-pixel limit"));

  DatasetSpec spec{.name = "imagenet", .root = dir.path().string(), .split = "train", .augment = false,
                   .cropSize = 32, .maxImagePixels = 1999};
  std::vector<float> pixels(3 * 32 * 32);
  int64_t label = -1;
  Rng rng(0);
  EXPECT_THAT(errorOf([&] { makeDataset(spec)->get(0, rng, pixels.data(), &label); }),
              HasSubstr("exceeds the 1999-pixel limit"));
  spec.maxImagePixels = 2000;
  makeDataset(spec)->get(0, rng, pixels.data(), &label);
  EXPECT_EQ(label, 0);
  spec.maxImagePixels = kMaxImagePixels + 1;
  EXPECT_THAT(errorOf([&] { makeDataset(spec); }), HasSubstr("above the decoder's limit"));
}

}  // namespace
}  // namespace aps::data
