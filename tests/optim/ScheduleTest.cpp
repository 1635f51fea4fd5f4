#include "framework/core/Error.h"
#include "framework/optim/ConstantLr.h"
#include "framework/optim/CosineLr.h"
#include "framework/optim/LrScheduler.h"
#include "framework/optim/MultiStepLr.h"
#include "framework/optim/PolynomialLr.h"
#include "framework/optim/Sgd.h"
#include "framework/optim/StepLr.h"
#include "framework/optim/WarmupLr.h"

#include <gtest/gtest.h>

#include <cmath>

namespace {

namespace optim = aps::optim;

TEST(Schedules, StepAndMultiStep) {
  optim::StepLr step(1.0, 10, 0.5);
  EXPECT_DOUBLE_EQ(step.lr(0), 1.0);
  EXPECT_DOUBLE_EQ(step.lr(9), 1.0);
  EXPECT_DOUBLE_EQ(step.lr(10), 0.5);
  EXPECT_DOUBLE_EQ(step.lr(25), 0.25);
  optim::MultiStepLr multi(1.6, {40, 80}, 0.1);
  EXPECT_DOUBLE_EQ(multi.lr(39), 1.6);
  EXPECT_NEAR(multi.lr(40), 0.16, 1e-12);
  EXPECT_NEAR(multi.lr(85), 0.016, 1e-12);
  EXPECT_THROW(optim::MultiStepLr(1.0, {80, 40}, 0.1), aps::Error);
  EXPECT_THROW(optim::StepLr(1.0, 0, 0.1), aps::Error);
}

TEST(Schedules, CosineAndPolynomial) {
  optim::CosineLr cosine(1.0, 100, 0.1);
  EXPECT_DOUBLE_EQ(cosine.lr(0), 1.0);
  EXPECT_NEAR(cosine.lr(50), 0.55, 1e-12);
  EXPECT_NEAR(cosine.lr(25), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-12);
  EXPECT_DOUBLE_EQ(cosine.lr(100), 0.1);
  EXPECT_DOUBLE_EQ(cosine.lr(1000), 0.1);
  optim::PolynomialLr poly(2.0, 10, 2.0, 0.0);
  EXPECT_DOUBLE_EQ(poly.lr(0), 2.0);
  EXPECT_NEAR(poly.lr(5), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(poly.lr(10), 0.0);
}

TEST(Schedules, LinearWarmupIntoMilestones) {
  // The APS artifact's CIFAR recipe: 0.1 -> 1.6 over 5 epochs, x0.1 at 40 and 80.
  optim::WarmupLr warm(std::make_shared<optim::MultiStepLr>(1.6, std::vector<int64_t>{40, 80}, 0.1), 5, 0.1);
  EXPECT_DOUBLE_EQ(warm.lr(0), 0.1);
  EXPECT_NEAR(warm.lr(1), 0.1 + 1.5 / 5, 1e-12);
  EXPECT_NEAR(warm.lr(4), 0.1 + 1.5 * 4 / 5, 1e-12);
  EXPECT_DOUBLE_EQ(warm.lr(5), 1.6);
  EXPECT_NEAR(warm.lr(40), 0.16, 1e-12);
  optim::WarmupLr none(std::make_shared<optim::ConstantLr>(0.3), 0, 0.0);
  EXPECT_DOUBLE_EQ(none.lr(0), 0.3);
}

TEST(LrScheduler, DrivesTheOptimizerAndResumes) {
  aps::Tensor p = aps::Tensor::zeros({1}).setRequiresGrad();
  optim::Sgd sgd({{"p", p}}, {.lr = 0.0});
  auto schedule = std::make_shared<optim::StepLr>(1.0, 2, 0.1);
  optim::LrScheduler scheduler(schedule, sgd);
  std::vector<double> seen;
  for (int i = 0; i < 3; ++i) {
    seen.push_back(scheduler.apply());
    scheduler.advance();
  }
  EXPECT_EQ(seen, (std::vector<double>{1.0, 1.0, 0.1}));
  EXPECT_DOUBLE_EQ(sgd.lr(), 0.1);
  optim::LrScheduler resumed(schedule, sgd);
  resumed.loadStateDict(scheduler.stateDict());
  EXPECT_EQ(resumed.step(), 3);
  EXPECT_NEAR(resumed.apply(), 0.1, 1e-15);
  EXPECT_THROW(resumed.loadStateDict({}), aps::Error);
}

}  // namespace
