#include "data/DistributedSampler.h"
#include "framework/core/Error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace aps::data {
namespace {

using V = std::vector<int64_t>;

// Expected values follow torch.utils.data.distributed.DistributedSampler(shuffle=False).
TEST(DistributedSampler, PadsLikePyTorchWhenNotDroppingLast) {
  const DistributedSampler s(10, 4, 0, /*shuffle=*/false);
  EXPECT_EQ(s.numSamples(), 3);
  EXPECT_EQ(s.totalSize(), 12);
  EXPECT_EQ(s.shard(0, 0), (V{0, 4, 8}));
  EXPECT_EQ(s.shard(1, 0), (V{1, 5, 9}));
  EXPECT_EQ(s.shard(2, 0), (V{2, 6, 0}));
  EXPECT_EQ(s.shard(3, 0), (V{3, 7, 1}));
}

TEST(DistributedSampler, DropsTheTailLikePyTorch) {
  const DistributedSampler s(10, 4, 0, false, 0, /*dropLast=*/true);
  EXPECT_EQ(s.numSamples(), 2);
  EXPECT_EQ(s.shard(0, 0), (V{0, 4}));
  EXPECT_EQ(s.shard(3, 0), (V{3, 7}));
  const DistributedSampler even(12, 4, 0, false, 0, true);
  EXPECT_EQ(even.numSamples(), 3);
}

TEST(DistributedSampler, PaddingLongerThanTheDatasetRepeatsIt) {
  const DistributedSampler s(2, 5, 0, false);
  EXPECT_EQ(s.epochOrder(0), (V{0, 1, 0, 1, 0}));
  EXPECT_EQ(s.shard(3, 0), (V{1}));
  EXPECT_THROW(DistributedSampler(2, 5, 0, false, 0, true), aps::Error);
}

TEST(DistributedSampler, ShuffleIsSeededByEpochAndSharedByAllRanks) {
  const int64_t n = 1003;
  const int ranks = 8;
  const DistributedSampler a(n, ranks, 3, true, 42);
  const DistributedSampler b(n, ranks, 3, true, 42);
  EXPECT_EQ(a.indices(5), b.indices(5));  // identical on every run
  EXPECT_NE(a.indices(5), a.indices(6));
  EXPECT_NE(a.indices(5), DistributedSampler(n, ranks, 3, true, 43).indices(5));

  // Every rank's own sampler agrees with shard() of any other, and the shards deal out one
  // permutation of the dataset (plus the head repeated as padding).
  V all;
  for (int r = 0; r < ranks; ++r) {
    const V mine = DistributedSampler(n, ranks, r, true, 42).indices(7);
    EXPECT_EQ(mine, a.shard(r, 7));
    EXPECT_EQ(static_cast<int64_t>(mine.size()), a.numSamples());
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  V expected(static_cast<size_t>(n));
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);
  const V order = a.epochOrder(7);
  EXPECT_EQ(V(order.begin() + n, order.end()), V(order.begin(), order.begin() + (a.totalSize() - n)));
  EXPECT_NE(V(order.begin(), order.begin() + 20), V(expected.begin(), expected.begin() + 20));
}

TEST(DistributedSampler, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(10, 4, 4), aps::Error);
  EXPECT_THROW(DistributedSampler(10, 0, 0), aps::Error);
  EXPECT_THROW(DistributedSampler(0, 1, 0), aps::Error);
}

// The simulator deals all its ranks' shares from one shuffle (shards): each must be the share
// that rank alone computes (shard), which a real rank reads.
TEST(DistributedSampler, ShardsOfManyRanksAreEachRanksShard) {
  const DistributedSampler s(1003, 16, 0, /*shuffle=*/true, /*seed=*/7);
  for (uint64_t epoch : {0u, 3u}) {
    const auto all = s.shards(0, 16, epoch);
    ASSERT_EQ(all.size(), 16u);
    for (int r = 0; r < 16; ++r) EXPECT_EQ(all[static_cast<size_t>(r)], s.shard(r, epoch)) << r;
    const auto some = s.shards(5, 3, epoch);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(some[static_cast<size_t>(r)], s.shard(5 + r, epoch)) << r;
  }
  EXPECT_NE(s.shards(0, 1, 0).front(), s.shards(0, 1, 1).front());  // a new shuffle per epoch
  EXPECT_THROW(s.shards(14, 3, 0), aps::Error);
  EXPECT_THROW(s.shards(0, 0, 0), aps::Error);
}

}  // namespace
}  // namespace aps::data
