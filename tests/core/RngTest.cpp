#include "framework/core/Rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace {

TEST(Philox, MatchesTheRandom123KnownAnswer) {
  // Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
  const auto zero = aps::philox4x32(0, 0, 0);
  EXPECT_EQ(zero[0], 0x6627e8d5u);
  EXPECT_EQ(zero[1], 0xe169c58du);
  EXPECT_EQ(zero[2], 0xbc57ac4cu);
  EXPECT_EQ(zero[3], 0x9b00dbd8u);
}

TEST(Rng, SameSeedSameStreamAndStateRestores) {
  aps::Rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.nextU64(), b.nextU64());
  EXPECT_NE(a.nextU64(), c.nextU64());
  const auto saved = a.state();
  const uint64_t next = a.nextU64();
  a.setState(saved);
  EXPECT_EQ(a.nextU64(), next);
}

TEST(Rng, UniformAndNormalHaveTheRightMoments) {
  aps::Rng rng(7);
  const int n = 200000;
  double sum = 0, sumSq = 0, nsum = 0, nsumSq = 0;
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sumSq += u * u;
    const double z = rng.normal();
    nsum += z;
    nsumSq += z * z;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(sumSq / n - 0.25, 1.0 / 12.0, 0.003);
  EXPECT_NEAR(nsum / n, 0.0, 0.01);
  EXPECT_NEAR(nsumSq / n, 1.0, 0.02);
}

TEST(Rng, BelowCoversTheRange) {
  aps::Rng rng(1);
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t x = rng.below(10);
    ASSERT_LT(x, 10u);
    seen.insert(x);
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(Rng, StatelessBitsDependOnEveryInput) {
  EXPECT_EQ(aps::randomBits32(1, 2, 3), aps::randomBits32(1, 2, 3));
  EXPECT_NE(aps::randomBits32(1, 2, 3), aps::randomBits32(1, 2, 4));
  EXPECT_NE(aps::randomBits32(1, 2, 3), aps::randomBits32(1, 3, 3));
  EXPECT_NE(aps::randomBits32(1, 2, 3), aps::randomBits32(2, 2, 3));
}

}  // namespace
