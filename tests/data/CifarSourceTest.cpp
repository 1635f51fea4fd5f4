#include "data/CifarSource.h"
#include "tests/data/DataTestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace aps::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

// CIFAR-10: five training batches of `perBatch` records and a test batch; label of record i is i % 10.
void writeCifar10(const TempDir& dir, int perBatch) {
  for (int b = 0; b < 6; ++b) {
    std::vector<std::vector<uint8_t>> labels;
    for (int r = 0; r < perBatch; ++r) labels.push_back({static_cast<uint8_t>((b * perBatch + r) % 10)});
    const std::string name = b < 5 ? "data_batch_" + std::to_string(b + 1) + ".bin" : "test_batch.bin";
    testing::writeBytes(dir / name, testing::cifarRecords(b * perBatch, perBatch, labels));
  }
}

TEST(CifarSource, Cifar10ReadsAllTrainingBatchesInOrderAsRgb) {
  TempDir dir;
  writeCifar10(dir, 3);
  const CifarSource train(dir.path().string(), "train", CifarSource::Variant::kCifar10);
  const CifarSource test(dir.path().string(), "test", CifarSource::Variant::kCifar10);
  ASSERT_EQ(train.size(), 15);
  ASSERT_EQ(test.size(), 3);
  EXPECT_EQ(train.numClasses(), 10);
  Example ex;
  train.read(7, ex);  // data_batch_3.bin, record 1
  EXPECT_EQ(ex.label, 7);
  ASSERT_EQ(ex.image.height, 32);
  ASSERT_EQ(ex.image.width, 32);
  ASSERT_EQ(ex.image.channels, 3);
  for (int y : {0, 5, 31})
    for (int x : {0, 17, 31})
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(ex.image.pixels[static_cast<size_t>((y * 32 + x) * 3 + c)], testing::cifarPixel(7, c, y, x));
  EXPECT_THAT(train.describe(7), HasSubstr("data_batch_3.bin record 1"));
  test.read(2, ex);
  EXPECT_EQ(ex.label, 17 % 10);
  EXPECT_EQ(ex.image.pixels[0], testing::cifarPixel(17, 0, 0, 0));
}

TEST(CifarSource, Cifar100HasCoarseAndFineLabels) {
  TempDir dir;
  const std::vector<std::vector<uint8_t>> labels = {{3, 99}, {19, 0}};
  testing::writeBytes(dir / "train.bin", testing::cifarRecords(0, 2, labels));
  testing::writeBytes(dir / "test.bin", testing::cifarRecords(0, 1, {{4, 42}}));
  const CifarSource fine(dir.path().string(), "train", CifarSource::Variant::kCifar100Fine);
  const CifarSource coarse(dir.path().string(), "train", CifarSource::Variant::kCifar100Coarse);
  EXPECT_EQ(fine.numClasses(), 100);
  EXPECT_EQ(coarse.numClasses(), 20);
  Example ex;
  fine.read(0, ex);
  EXPECT_EQ(ex.label, 99);
  EXPECT_EQ(ex.image.pixels[3 * 33 + 1], testing::cifarPixel(0, 1, 1, 1));
  coarse.read(1, ex);
  EXPECT_EQ(ex.label, 19);
  EXPECT_EQ(CifarSource(dir.path().string(), "test", CifarSource::Variant::kCifar100Fine).size(), 1);
}

TEST(CifarSource, MissingBatchNamesThePath) {
  TempDir dir;
  writeCifar10(dir, 1);
  std::filesystem::remove(dir / "data_batch_4.bin");
  const std::string msg =
      testing::errorOf([&] { CifarSource(dir.path().string(), "train", CifarSource::Variant::kCifar10); });
  EXPECT_THAT(msg, HasSubstr(dir / "data_batch_4.bin"));
  EXPECT_THAT(msg, HasSubstr("not found"));
}

TEST(CifarSource, TruncatedFileIsAnErrorNamingIt) {
  TempDir dir;
  auto bytes = testing::cifarRecords(0, 2, {{1}, {2}});
  bytes.resize(bytes.size() - 100);
  testing::writeBytes(dir / "test_batch.bin", bytes);
  const std::string msg =
      testing::errorOf([&] { CifarSource(dir.path().string(), "test", CifarSource::Variant::kCifar10); });
  EXPECT_THAT(msg, HasSubstr(dir / "test_batch.bin"));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST(CifarSource, OutOfRangeLabelIsAnErrorNamingTheFile) {
  TempDir dir;
  testing::writeBytes(dir / "test_batch.bin", testing::cifarRecords(0, 2, {{1}, {10}}));
  const std::string msg =
      testing::errorOf([&] { CifarSource(dir.path().string(), "test", CifarSource::Variant::kCifar10); });
  EXPECT_THAT(msg, HasSubstr(dir / "test_batch.bin"));
  EXPECT_THAT(msg, HasSubstr("label 10 of record 1"));
  testing::writeBytes(dir / "test.bin", testing::cifarRecords(0, 1, {{20, 5}}));
  EXPECT_THAT(
      testing::errorOf([&] { CifarSource(dir.path().string(), "test", CifarSource::Variant::kCifar100Coarse); }),
      HasSubstr("label 20"));
}

}  // namespace
}  // namespace aps::data
