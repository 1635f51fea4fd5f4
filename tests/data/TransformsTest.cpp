#include "data/GeometricTransforms.h"
#include "data/Normalize.h"
#include "data/SampleRng.h"
#include "framework/core/Error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace aps::data {
namespace {

// An RGB image whose pixel (y, x) is (y + 1, x + 1, 7), so a transformed pixel tells where it came from.
Example positionImage(int h, int w, bool withMask = false) {
  Example ex;
  ex.image.reshape(h, w, 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &ex.image.pixels[static_cast<size_t>((y * w + x) * 3)];
      p[0] = static_cast<uint8_t>(y + 1);
      p[1] = static_cast<uint8_t>(x + 1);
      p[2] = 7;
    }
  if (withMask) {
    ex.mask.reshape(h, w);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        ex.mask.labels[static_cast<size_t>(y * w + x)] = static_cast<uint8_t>((y * w + x) % 19);
  }
  return ex;
}

const uint8_t* pixel(const Example& ex, int y, int x) {
  return &ex.image.pixels[static_cast<size_t>((y * ex.image.width + x) * ex.image.channels)];
}

TEST(Resize, ShorterSideFollowsTorchvision) {
  Rng rng(0);
  Example wide = positionImage(375, 500);
  Resize(256).apply(wide, rng);
  EXPECT_EQ(wide.image.height, 256);
  EXPECT_EQ(wide.image.width, 341);  // int(256 * 500 / 375)
  Example tall = positionImage(500, 375);
  Resize(256).apply(tall, rng);
  EXPECT_EQ(tall.image.height, 341);
  EXPECT_EQ(tall.image.width, 256);
  Example exact = positionImage(20, 30);
  Resize(40, 10).apply(exact, rng);
  EXPECT_EQ(exact.image.height, 40);
  EXPECT_EQ(exact.image.width, 10);
  EXPECT_EQ(exact.image.channels, 3);
}

TEST(Resize, KeepsAFlatImageFlatAndLabelsNearest) {
  Rng rng(0);
  for (int size : {5, 40}) {  // shrinking and enlarging
    Example ex;
    ex.image.reshape(13, 17, 3);
    std::fill(ex.image.pixels.begin(), ex.image.pixels.end(), uint8_t{77});
    ex.mask.reshape(13, 17);
    for (int y = 0; y < 13; ++y)
      for (int x = 0; x < 17; ++x) ex.mask.labels[static_cast<size_t>(y * 17 + x)] = x < 8 ? 3 : 12;
    Resize(size, size).apply(ex, rng);
    ASSERT_EQ(ex.mask.height, size);
    for (uint8_t v : ex.image.pixels) ASSERT_EQ(v, 77);
    // Nearest neighbour never invents a class: left half 3, right half 12, nothing else.
    for (int y = 0; y < size; ++y) {
      EXPECT_EQ(ex.mask.labels[static_cast<size_t>(y * size)], 3);
      EXPECT_EQ(ex.mask.labels[static_cast<size_t>(y * size + size - 1)], 12);
    }
    for (uint8_t v : ex.mask.labels) ASSERT_TRUE(v == 3 || v == 12);
  }
}

TEST(CenterCrop, OffsetsRoundHalfToEvenLikeTorchvision) {
  Rng rng(0);
  Example ex = positionImage(7, 6);
  CenterCrop(4).apply(ex, rng);  // top = round(1.5) = 2, left = round(1.0) = 1
  ASSERT_EQ(ex.image.height, 4);
  EXPECT_EQ(pixel(ex, 0, 0)[0], 2 + 1);
  EXPECT_EQ(pixel(ex, 0, 0)[1], 1 + 1);
  Example odd = positionImage(6, 6);
  CenterCrop(1).apply(odd, rng);  // round(2.5) = 2
  EXPECT_EQ(pixel(odd, 0, 0)[0], 2 + 1);
}

TEST(CenterCrop, PadsASmallImageWithZerosAndLabelsWithIgnore) {
  Rng rng(0);
  Example ex = positionImage(2, 3, true);
  CenterCrop(4, 6).apply(ex, rng);  // pad top 1, bottom 1, left 1, right 2
  ASSERT_EQ(ex.image.height, 4);
  ASSERT_EQ(ex.image.width, 6);
  EXPECT_EQ(pixel(ex, 0, 0)[2], 0);
  EXPECT_EQ(ex.mask.labels[0], kIgnoreLabel);
  EXPECT_EQ(pixel(ex, 1, 1)[0], 1);
  EXPECT_EQ(pixel(ex, 1, 1)[1], 1);
  EXPECT_EQ(ex.mask.labels[1 * 6 + 1], 0);
  EXPECT_EQ(pixel(ex, 2, 3)[1], 3);
  EXPECT_EQ(pixel(ex, 2, 4)[2], 0);
}

TEST(RandomCrop, PaddedCropCoversEveryOffsetAndCopiesPixels) {
  std::set<std::pair<int, int>> offsets;
  for (uint64_t i = 0; i < 3000; ++i) {
    Example ex = positionImage(32, 32);
    Rng rng = sampleRng(1, 0, i);
    RandomCrop(32, 32, 4).apply(ex, rng);
    ASSERT_EQ(ex.image.height, 32);
    ASSERT_EQ(ex.image.width, 32);
    // Find the offset from the centre pixel (always inside with padding 4), then check all pixels.
    const int top = pixel(ex, 16, 16)[0] - 1 - 16, left = pixel(ex, 16, 16)[1] - 1 - 16;
    ASSERT_GE(top, -4);
    ASSERT_LE(top, 4);
    ASSERT_GE(left, -4);
    ASSERT_LE(left, 4);
    offsets.insert({top, left});
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x) {
        const bool inside = y + top >= 0 && y + top < 32 && x + left >= 0 && x + left < 32;
        const uint8_t* p = pixel(ex, y, x);
        ASSERT_EQ(p[0], inside ? y + top + 1 : 0);
        ASSERT_EQ(p[1], inside ? x + left + 1 : 0);
        ASSERT_EQ(p[2], inside ? 7 : 0);
      }
  }
  EXPECT_EQ(offsets.size(), 81u);
}

TEST(HorizontalFlip, MirrorsImageAndLabelsTogether) {
  Rng rng(0);
  Example ex = positionImage(3, 5, true);
  RandomHorizontalFlip(1.0f).apply(ex, rng);
  EXPECT_EQ(pixel(ex, 1, 0)[1], 5);
  EXPECT_EQ(pixel(ex, 1, 4)[1], 1);
  EXPECT_EQ(ex.mask.labels[1 * 5 + 0], (1 * 5 + 4) % 19);
  Example same = positionImage(3, 5);
  RandomHorizontalFlip(0.0f).apply(same, rng);
  EXPECT_EQ(pixel(same, 0, 0)[1], 1);
  int flipped = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    Example e = positionImage(1, 2);
    Rng r = sampleRng(3, 0, i);
    RandomHorizontalFlip().apply(e, r);
    flipped += pixel(e, 0, 0)[1] == 2;
  }
  EXPECT_NEAR(flipped / 2000.0, 0.5, 0.05);
}

TEST(RandomResizedCrop, FallsBackToAClampedCentreCrop) {
  // With scale (1, 1) no 3/4..4/3 box of the full area fits a 10x100 image, so all ten tries
  // fail: torchvision then takes h = 10, w = round(10 * 4/3) = 13, centred.
  const RandomResizedCrop rrc(8, 8, {1.0, 1.0});
  Rng rng(5);
  const auto box = rrc.sampleBox(10, 100, rng);
  EXPECT_EQ(box.top, 0);
  EXPECT_EQ(box.height, 10);
  EXPECT_EQ(box.width, 13);
  EXPECT_EQ(box.left, (100 - 13) / 2);
}

TEST(RandomResizedCrop, BoxesFollowTheScaleAndRatioRanges) {
  const RandomResizedCrop rrc(224);
  for (uint64_t i = 0; i < 2000; ++i) {
    Rng rng = sampleRng(9, 0, i);
    const auto b = rrc.sampleBox(375, 500, rng);
    ASSERT_GE(b.top, 0);
    ASSERT_GE(b.left, 0);
    ASSERT_LE(b.top + b.height, 375);
    ASSERT_LE(b.left + b.width, 500);
    const double area = static_cast<double>(b.height) * b.width / (375.0 * 500.0);
    ASSERT_GE(area, 0.07);
    ASSERT_LE(area, 1.0);
    const double ratio = static_cast<double>(b.width) / b.height;
    ASSERT_GE(ratio, 0.75 * 0.9);
    ASSERT_LE(ratio, 4.0 / 3.0 / 0.9);
  }
  Example ex = positionImage(375, 500);
  Rng rng(1);
  rrc.apply(ex, rng);
  EXPECT_EQ(ex.image.height, 224);
  EXPECT_EQ(ex.image.width, 224);
}

TEST(JointTransforms, LabelsStayAlignedWithPixelsThroughFlipAndPaddedCrop) {
  for (uint64_t i = 0; i < 200; ++i) {
    Example ex = positionImage(9, 11, true);
    Rng rng = sampleRng(2, 0, i);
    RandomHorizontalFlip().apply(ex, rng);
    RandomCrop(12, 14).apply(ex, rng);  // larger than the image: padded bottom/right
    ASSERT_EQ(ex.mask.height, 12);
    ASSERT_EQ(ex.mask.width, 14);
    for (int y = 0; y < 12; ++y)
      for (int x = 0; x < 14; ++x) {
        const uint8_t* p = pixel(ex, y, x);
        const uint8_t label = ex.mask.labels[static_cast<size_t>(y * 14 + x)];
        if (p[2] == 0) {
          ASSERT_EQ(label, kIgnoreLabel);
        } else {
          ASSERT_EQ(label, ((p[0] - 1) * 11 + (p[1] - 1)) % 19);
        }
      }
  }
}

TEST(JointTransforms, RandomScaleResizesBothAndInventsNoClass) {
  for (uint64_t i = 0; i < 50; ++i) {
    Example ex = positionImage(20, 30, true);
    Rng rng = sampleRng(4, 0, i);
    RandomScale(0.5, 2.0).apply(ex, rng);
    ASSERT_EQ(ex.mask.height, ex.image.height);
    ASSERT_EQ(ex.mask.width, ex.image.width);
    ASSERT_GE(ex.image.height, 10);
    ASSERT_LE(ex.image.height, 40);
    EXPECT_NEAR(static_cast<double>(ex.image.width) / ex.image.height, 1.5, 0.1);
    for (uint8_t v : ex.mask.labels) ASSERT_LT(v, 19);
  }
}

TEST(Normalize, WritesChannelFirstFloatsWithTorchvisionArithmetic) {
  Example ex = positionImage(2, 3);
  const Normalize norm({0.5f, 0.25f, 0.0f}, {0.5f, 2.0f, 1.0f});
  std::vector<float> out(18);
  norm.apply(ex.image, out.data());
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x) {
      EXPECT_EQ(out[static_cast<size_t>(0 * 6 + y * 3 + x)], (static_cast<float>(y + 1) / 255.0f - 0.5f) / 0.5f);
      EXPECT_EQ(out[static_cast<size_t>(1 * 6 + y * 3 + x)], (static_cast<float>(x + 1) / 255.0f - 0.25f) / 2.0f);
      EXPECT_EQ(out[static_cast<size_t>(2 * 6 + y * 3 + x)], 7.0f / 255.0f);
    }
  EXPECT_THROW(Normalize({0.5f}, {0.5f, 0.5f}), aps::Error);
  EXPECT_THROW(Normalize({0.5f}, {0.0f}), aps::Error);
  EXPECT_THROW(Normalize({0.5f}, {1.0f}).apply(ex.image, out.data()), aps::Error);
}

}  // namespace
}  // namespace aps::data
