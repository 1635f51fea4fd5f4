#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "precision/ErrorFeedback.h"
#include "precision/Fp8LmScaler.h"
#include "precision/QuantizationStats.h"
#include "precision/Quantizer.h"

#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include <cmath>
#include <limits>
#include <vector>

namespace aps::precision {
namespace {

TEST(Fp8LmScaler, HalvesOnSaturationAndDoublesOver1000QuietSteps) {
  Fp8LmScaler scaler(FloatFormat::preset("e4m3"), 8);
  EXPECT_EQ(scaler.state().mu, 1.0);
  scaler.update(11, 1000000);  // 0.0011% > 0.001%
  EXPECT_EQ(scaler.state().mu, 0.5);
  scaler.update(10, 1000000);  // exactly 0.001%: not more than the threshold
  for (int i = 1; i < 1000; ++i) scaler.update(0, 1000000);
  EXPECT_NEAR(scaler.state().mu, 1.0, 1e-9);
  EXPECT_EQ(scaler.state().step, 1001);
  const std::vector<float> scaled = {448.0f, -500.0f, 1.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_EQ(scaler.countSaturated(scaled.data(), 4), 3);
}

// factor = mu * 2^floor(log2(448 / amax)) / sqrt(N) for e4m3 (max 448) and N = 4.
TEST(Fp8LmScaler, AnOverflowHalvesMuWhateverTheFraction) {
  Fp8LmScaler scaler(FloatFormat::preset("e4m3"), 8);
  scaler.update(1, 1000000000, true);  // one value in 10^9 overflowed into NaN: the step is lost
  EXPECT_DOUBLE_EQ(scaler.state().mu, 0.5);
  scaler.update(1, 1000000000);  // a value at the max, no overflow: below the threshold
  EXPECT_DOUBLE_EQ(scaler.state().mu, 0.5 * std::exp2(1 / 1000.0));
}

TEST(Fp8LmScaler, PerTensorFactorMapsTheAmaxBelowTheMaxAndPreScalesBySqrtN) {
  const Fp8LmScaler scaler(FloatFormat::preset("e4m3"), 4);
  EXPECT_TRUE(scaler.perTensor());
  EXPECT_EQ(scaler.factor(1.0, 1.0f), 128.0f);       // 448 / 1 = 2^8.8: 2^8 / 2
  EXPECT_EQ(scaler.factor(1.0, 448.0f), 0.5f);       // exactly the max: 2^0 / 2
  EXPECT_EQ(scaler.factor(1.0, 448.00003f), 0.25f);  // just above: 2^-1 / 2
  EXPECT_EQ(scaler.factor(1.0, 3.5f), 64.0f);        // 448 / 3.5 = 128 exactly: 2^7 / 2
  EXPECT_EQ(scaler.factor(1.0, 3.5000002f), 32.0f);  // a hair above: 2^6 / 2
  EXPECT_EQ(scaler.factor(0.25, 1.0f), 32.0f);       // mu multiplies
  EXPECT_EQ(scaler.factor(1.0, 0.0f), 0.5f);         // all zeros: the pre-scale alone
  EXPECT_EQ(scaler.factor(1.0, std::numeric_limits<float>::infinity()), 0.5f);
  EXPECT_EQ(scaler.factor(1.0, 1e-40f), 0x1p127f);  // a subnormal amax: clamped to float's range
  for (float amax : {1e-30f, 0.001f, 0.7f, 300.0f, 1e30f}) {
    const float f = scaler.factor(1.0, amax);
    EXPECT_LE(amax * f * 2.0f, 448.0f) << amax;  // the largest value fits, before the pre-scale
    EXPECT_GT(amax * f * 4.0f, 448.0f) << amax;  // and uses the top binade
  }
  Fp8LmScaler::Options muAlone;
  muAlone.perTensor = false;
  EXPECT_EQ(Fp8LmScaler(FloatFormat::preset("e4m3"), 4, muAlone).factor(0.25, 1.0f), 0.25f);
}

TEST(Fp8LmScaler, StateRoundTripsExactlyThroughItsStateDict) {
  Fp8LmScaler scaler(FloatFormat::preset("e5m2"), 2);
  for (int i = 0; i < 37; ++i) scaler.update(i % 5 == 0 ? 100 : 0, 1000);
  const auto state = scaler.stateDict();
  Fp8LmScaler restored(FloatFormat::preset("e5m2"), 2);
  restored.loadStateDict(state);
  EXPECT_EQ(restored.state(), scaler.state());
  restored.update(0, 10);
  scaler.update(0, 10);
  EXPECT_EQ(restored.state(), scaler.state());
  const std::vector<int64_t> nanMu{std::bit_cast<int64_t>(std::nan("")), 3};
  EXPECT_ERROR_NAMES(restored.loadStateDict({{"state", Tensor::fromVector(std::span<const int64_t>(nanMu), {2})}}),
                     "mu nan");
  EXPECT_ERROR_NAMES(restored.loadStateDict({}), "no 'state'");
}

TEST(ErrorFeedback, CarriesTheQuantizationResidualToTheNextStep) {
  const Quantizer q(FloatFormat::preset("e2m1"));
  ErrorFeedback feedback({3});
  const std::vector<float> grad = {0.2f, 1.2f, -0.1f};
  std::vector<float> sentTotal(3, 0.0f);
  const int steps = 200;
  for (int s = 0; s < steps; ++s) {
    std::vector<float> g = grad, sent(3);
    feedback.compensate(0, g.data());
    q.quantize(g.data(), sent.data(), 3, RoundingMode::NearestEven);
    feedback.update(0, g.data(), sent.data());
    for (int i = 0; i < 3; ++i) sentTotal[i] += sent[i];
  }
  // Without feedback 0.2 and -0.1 would always round to 0; with it the average sent
  // value equals the gradient up to residual / steps.
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(sentTotal[i] / steps, grad[i], 0.5 / steps) << i;
  EXPECT_EQ(feedback.state().size(), 1u);
  ErrorFeedback copy({3});
  copy.setState(feedback.state());
  EXPECT_EQ(copy.residual(0), feedback.residual(0));
  EXPECT_THROW(copy.setState({{1.0f}}), aps::Error);
}

TEST(QuantizationStats, CountsFlushesSaturationAndErrorOverAWindow) {
  const std::vector<float> x = {1e-6f, 0.0f, 1000.0f, 1.0f};
  const std::vector<float> q = {0.0f, 0.0f, 448.0f, 1.0f};
  const auto c = QuantizationCounts::measure(x.data(), q.data(), 4, 448.0f);
  EXPECT_EQ(c.nonzero, 3);
  EXPECT_EQ(c.flushed, 1);
  EXPECT_EQ(c.saturated, 1);
  EXPECT_NEAR(c.relativeError(), std::sqrt((552.0 * 552.0 + 1e-12) / (1e6 + 1 + 1e-12)), 1e-9);
  LayerStatistics stats(2, 3);
  for (int i = 0; i < 5; ++i) stats.record(0, c);
  EXPECT_EQ(stats.steps(0), 3);
  EXPECT_EQ(stats.window(0).flushed, 3);
  EXPECT_NEAR(stats.window(0).flushedFraction(), 1.0 / 3.0, 1e-12);
  EXPECT_EQ(stats.window(1).total, 0);
}

}  // namespace
}  // namespace aps::precision
