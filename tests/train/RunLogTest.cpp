// The progress bar's smoothed step time (framework/train/RunLog.h): seeded by the mean of the
// first steps, then an exponential moving average, so one slow step hardly moves the ETA.
#include "framework/train/RunLog.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace aps::train {
namespace {

TEST(RunLogEta, NothingBeforeTheFirstStep) {
  const SmoothedStepTime t;
  EXPECT_EQ(t.seconds, 0.0);
  EXPECT_EQ(t.eta(100), 0.0);
}

TEST(RunLogEta, SeededByTheMeanOfTheFirstSteps) {
  SmoothedStepTime t;
  t.update(4.0);  // a slow first step (warm-up) is one sample of the seed, not the estimate
  EXPECT_DOUBLE_EQ(t.seconds, 4.0);
  for (int i = 0; i < 3; ++i) t.update(1.0);
  EXPECT_DOUBLE_EQ(t.seconds, 7.0 / 4.0);
  for (int i = 4; i < t.seedSteps; ++i) t.update(1.0);
  EXPECT_DOUBLE_EQ(t.seconds, 13.0 / 10.0);  // the mean of the 10 seed steps
  EXPECT_DOUBLE_EQ(t.eta(100), 130.0);
}

TEST(RunLogEta, OneSlowStepMovesTheEtaByAlphaOfItsExcess) {
  SmoothedStepTime t;
  for (int i = 0; i < 50; ++i) t.update(0.5);
  EXPECT_DOUBLE_EQ(t.eta(1000), 500.0);
  t.update(10.5);  // one step 21 times as long: the estimate moves by alpha x 10 s, not to 10.5 s
  EXPECT_NEAR(t.seconds, 0.5 + t.alpha * 10.0, 1e-12);
  EXPECT_NEAR(t.eta(1000), 1500.0, 1e-9);
  for (int i = 0; i < 60; ++i) t.update(0.5);  // and decays back
  EXPECT_NEAR(t.seconds, 0.5, 0.01);
}

TEST(RunLogEta, FollowsALastingChangeOfPace) {
  SmoothedStepTime t;
  for (int i = 0; i < 20; ++i) t.update(1.0);
  for (int i = 0; i < 50; ++i) t.update(2.0);
  EXPECT_NEAR(t.seconds, 2.0, 0.01);  // 0.9^50 of the old pace is left
}

TEST(RunLogEta, IgnoresMeaninglessTimesAndNegativeRemainders) {
  SmoothedStepTime t;
  t.update(2.0);
  t.update(std::numeric_limits<double>::quiet_NaN());
  t.update(std::numeric_limits<double>::infinity());
  t.update(-1.0);
  EXPECT_EQ(t.steps, 1);
  EXPECT_DOUBLE_EQ(t.seconds, 2.0);
  EXPECT_EQ(t.eta(-5), 0.0);
  EXPECT_DOUBLE_EQ(t.eta(3), 6.0);
}

}  // namespace
}  // namespace aps::train
