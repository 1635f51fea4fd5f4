#include "data/CifarSource.h"
#include "data/DistributedSampler.h"
#include "data/GeometricTransforms.h"
#include "data/ImageFolderSource.h"
#include "data/Loader.h"
#include "data/SegmentationPairSource.h"
#include "data/TransformedDataset.h"
#include "tests/data/DataTestFiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

namespace aps::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

// A CIFAR-10 training set of 5 x 9 records through the CIFAR recipe (crop with padding, flip).
std::shared_ptr<const Dataset> cifarDataset(const TempDir& dir) {
  for (int b = 0; b < 5; ++b) {
    std::vector<std::vector<uint8_t>> labels;
    for (int r = 0; r < 9; ++r) labels.push_back({static_cast<uint8_t>((b * 9 + r) % 10)});
    testing::writeBytes(dir / ("data_batch_" + std::to_string(b + 1) + ".bin"),
                        testing::cifarRecords(b * 9, 9, labels));
  }
  auto source = std::make_shared<CifarSource>(dir.path().string(), "train", CifarSource::Variant::kCifar10);
  std::vector<std::shared_ptr<const Transform>> transforms = {std::make_shared<RandomCrop>(32, 32, 4),
                                                              std::make_shared<RandomHorizontalFlip>()};
  return std::make_shared<TransformedDataset>(source, transforms,
                                              Normalize({0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}));
}

std::vector<Batch> drain(Loader& loader, uint64_t epoch, const std::vector<int64_t>& indices) {
  loader.startEpoch(epoch, indices);
  std::vector<Batch> out;
  Batch b;
  while (loader.next(b)) out.push_back(b);
  return out;
}

TEST(Loader, BatchesAreIdenticalWhateverTheNumberOfWorkers) {
  TempDir dir;
  const auto dataset = cifarDataset(dir);
  ASSERT_EQ(dataset->size(), 45);
  EXPECT_EQ(dataset->sampleShape().image, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_TRUE(dataset->sampleShape().label.empty());
  const DistributedSampler sampler(45, 1, 0, true, 11);
  std::vector<std::vector<Batch>> runs;
  for (int workers : {0, 1, 3}) {
    Loader loader(dataset, {.batchSize = 7, .workers = workers, .prefetch = 2, .dropLast = false, .seed = 5});
    runs.push_back(drain(loader, 2, sampler.indices(2)));
    EXPECT_EQ(loader.batchesInEpoch(), 7);
    const LoaderStats stats = loader.stats();
    EXPECT_EQ(stats.batches, 7);
    EXPECT_EQ(stats.samples, 45);
    EXPECT_GE(stats.waitSeconds, 0.0);
    EXPECT_GT(stats.loadSeconds, 0.0);
    if (workers == 0) {
      EXPECT_EQ(stats.waitSeconds, stats.loadSeconds);  // all loading stalls the consumer
    }
  }
  const auto& ref = runs[0];
  ASSERT_EQ(ref.size(), 7u);
  EXPECT_EQ(ref.back().size(), 3);  // 45 = 6 * 7 + 3
  EXPECT_EQ(ref.back().imageShape, (std::vector<int64_t>{3, 3, 32, 32}));
  EXPECT_EQ(ref.back().labelShape, (std::vector<int64_t>{3}));
  std::vector<int64_t> seen;
  for (const auto& b : ref) {
    seen.insert(seen.end(), b.indices.begin(), b.indices.end());
    for (int64_t j = 0; j < b.size(); ++j)
      EXPECT_EQ(b.labels[static_cast<size_t>(j)], b.indices[static_cast<size_t>(j)] % 10);
  }
  EXPECT_EQ(seen, sampler.indices(2));
  for (size_t r = 1; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].size(), ref.size());
    for (size_t b = 0; b < ref.size(); ++b) {
      EXPECT_EQ(runs[r][b].indices, ref[b].indices);
      EXPECT_EQ(runs[r][b].labels, ref[b].labels);
      EXPECT_EQ(runs[r][b].imageShape, ref[b].imageShape);
      EXPECT_TRUE(runs[r][b].images == ref[b].images) << "workers run " << r << " batch " << b;
    }
  }
}

TEST(Loader, AugmentationDependsOnSeedEpochAndIndexOnly) {
  TempDir dir;
  const auto dataset = cifarDataset(dir);
  Loader loader(dataset, {.batchSize = 45, .workers = 2, .prefetch = 1, .dropLast = false, .seed = 5});
  std::vector<int64_t> order(45);
  for (int64_t i = 0; i < 45; ++i) order[static_cast<size_t>(i)] = i;
  const auto epoch0 = drain(loader, 0, order);
  const auto epoch1 = drain(loader, 1, order);
  const auto again0 = drain(loader, 0, order);
  EXPECT_TRUE(epoch0[0].images == again0[0].images);
  EXPECT_FALSE(epoch0[0].images == epoch1[0].images);
  // Index 17 alone, in another position, gets the same augmentation as inside the full batch.
  Loader single(dataset, {.batchSize = 1, .workers = 0, .prefetch = 1, .dropLast = false, .seed = 5});
  const auto just17 = drain(single, 1, {3, 17});
  const size_t sample = 3 * 32 * 32;
  EXPECT_TRUE(std::equal(just17[1].images.begin(), just17[1].images.end(), epoch1[0].images.begin() + 17 * sample));
}

TEST(Loader, DropLastAndShardsOfVirtualRanksCoverTheEpoch) {
  TempDir dir;
  const auto dataset = cifarDataset(dir);
  // 45 samples over 4 ranks: 12 each (3 padded); batches of 5 with dropLast: 2 per rank.
  Loader loader(dataset, {.batchSize = 5, .workers = 2, .prefetch = 3, .dropLast = true, .seed = 0});
  const int ranks = 4;
  std::vector<int64_t> all;
  for (int r = 0; r < ranks; ++r) {
    const DistributedSampler sampler(45, ranks, r, true, 3);
    const auto batches = drain(loader, 0, sampler.indices(0));
    ASSERT_EQ(batches.size(), 2u);
    for (const auto& b : batches) {
      EXPECT_EQ(b.size(), 5);
      all.insert(all.end(), b.indices.begin(), b.indices.end());
    }
  }
  EXPECT_EQ(all.size(), 40u);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());  // the dropped ones differ, the rest are distinct
}

TEST(Loader, AFailingSampleIsRethrownInItsBatchNamingTheFile) {
  TempDir dir;
  for (int i = 0; i < 6; ++i)
    testing::writeRgbImage(dir / ("a/" + std::to_string(i) + ".png"), 8, 8, {1, 2, 3}, {1, 2, 3});
  testing::writeBytes(dir / "a/4.png", {'n', 'o', 't', ' ', 'p', 'n', 'g'});
  auto source = std::make_shared<ImageFolderSource>(dir.path().string());
  auto dataset = std::make_shared<TransformedDataset>(source, std::vector<std::shared_ptr<const Transform>>{});
  for (int workers : {0, 2}) {
    Loader loader(dataset, {.batchSize = 2, .workers = workers, .prefetch = 2, .dropLast = false, .seed = 0});
    loader.startEpoch(0, {0, 1, 2, 3, 4, 5});
    Batch b;
    EXPECT_TRUE(loader.next(b));
    EXPECT_TRUE(loader.next(b));
    const std::string msg = testing::errorOf([&] { loader.next(b); });
    EXPECT_THAT(msg, HasSubstr(dir / "a/4.png"));
  }
}

TEST(Loader, SegmentationBatchesCarryLabelMaps) {
  TempDir dir;
  for (const std::string stem : {"c_000000_000019", "c_000001_000019", "c_000002_000019"}) {
    testing::writeRgbImage(dir / ("leftImg8bit/train/c/" + stem + "_leftImg8bit.png"), 12, 20, {5, 5, 5}, {5, 5, 5});
    testing::writeGreyPng(dir / ("gtFine/train/c/" + stem + "_gtFine_labelTrainIds.png"),
                          cv::Mat(12, 20, CV_8UC1, cv::Scalar(7)));
  }
  std::vector<std::shared_ptr<const Transform>> transforms = {std::make_shared<RandomScale>(0.5, 2.0),
                                                              std::make_shared<RandomCrop>(16, 16),
                                                              std::make_shared<RandomHorizontalFlip>()};
  auto dataset = std::make_shared<TransformedDataset>(openCityscapes(dir.path().string(), "train"), transforms);
  EXPECT_EQ(dataset->sampleShape().label, (std::vector<int64_t>{16, 16}));
  Loader loader(dataset, {.batchSize = 3, .workers = 2, .prefetch = 2, .dropLast = false, .seed = 1});
  const auto batches = drain(loader, 0, {0, 1, 2});
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].imageShape, (std::vector<int64_t>{3, 3, 16, 16}));
  EXPECT_EQ(batches[0].labelShape, (std::vector<int64_t>{3, 16, 16}));
  for (int64_t v : batches[0].labels) ASSERT_TRUE(v == 7 || v == 255);
}

TEST(Loader, RejectsBadOptionsAndIndices) {
  TempDir dir;
  const auto dataset = cifarDataset(dir);
  EXPECT_THROW(Loader(dataset, {.batchSize = 0}), aps::Error);
  Loader loader(dataset, {});
  EXPECT_THAT(testing::errorOf([&] { loader.startEpoch(0, {1, 45}); }), HasSubstr("index 45"));
}

}  // namespace
}  // namespace aps::data
