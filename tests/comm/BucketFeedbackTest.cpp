// Error feedback and FP8-LM's automatic scaler around the gradient reducer on simulated ranks:
// what quantization drops comes back in later steps, and mu settles where nothing saturates.
#include "comm/BucketScaling.h"
#include "comm/GradientReducer.h"
#include "comm/SimTransport.h"
#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace aps::comm {
namespace {

// `steps` all-reduces of the same per-rank gradients `fill(rank, i)` through e4m3 two_shot;
// returns the reduced gradients of every step and rank: [step][rank][value].
std::vector<std::vector<std::vector<float>>> run(int world, int steps, int64_t n,
                                                 const std::function<float(int, int64_t)>& fill,
                                                 BucketScaling::FormatScaling format,
                                                 BucketScaling** scalingOut = nullptr) {
  SimTransport transport(world);
  std::vector<std::vector<float>> grads(static_cast<size_t>(world), std::vector<float>(static_cast<size_t>(n)));
  std::vector<std::vector<NamedGradient>> named(static_cast<size_t>(world));
  for (int k = 0; k < world; ++k) named[static_cast<size_t>(k)] = {{"w", {grads[static_cast<size_t>(k)].data(), n}}};
  auto codec = std::shared_ptr<const precision::Codec>(precision::makeCodec("e4m3"));
  auto algorithm = std::shared_ptr<const AllReduceAlgorithm>(makeAllReduce({}, codec));
  ReducerOptions options;
  options.average = true;
  static std::shared_ptr<BucketScaling> keep;
  keep = std::make_shared<BucketScaling>(std::vector<BucketScaling::FormatScaling>{format}, 1, 4, world);
  keep->install(options);
  if (scalingOut) *scalingOut = keep.get();
  GradientReducer reducer(transport, std::move(named), {algorithm}, {}, options);
  std::vector<std::vector<std::vector<float>>> out;
  for (int s = 0; s < steps; ++s) {
    for (int k = 0; k < world; ++k)
      for (int64_t i = 0; i < n; ++i) grads[static_cast<size_t>(k)][static_cast<size_t>(i)] = fill(k, i);
    for (int k = 0; k < world; ++k) reducer.markReady(0, k);
    reducer.wait();
    keep->finishStep(transport);
    out.push_back(grads);
  }
  return out;
}

TEST(ErrorFeedback, ValuesBelowTheFormatArriveOverLaterSteps) {
  const precision::FloatFormat e4m3 = precision::FloatFormat::preset("e4m3");
  const float g = std::ldexp(1.0f, -12);  // an eighth of e4m3's smallest subnormal: always flushed
  const int steps = 40;
  for (bool feedback : {false, true}) {
    BucketScaling::FormatScaling f;
    f.format = e4m3;
    f.errorFeedback = feedback;
    const auto out = run(
        2, steps, 16, [&](int, int64_t) { return g; }, f);
    double sent = 0;
    for (const auto& step : out) {
      sent += step[0][0];
      EXPECT_EQ(step[0], step[1]);  // every rank holds the same bits
    }
    if (!feedback) {
      EXPECT_EQ(sent, 0.0);  // plain e4m3 loses all of it
    } else {
      // All of it arrives, up to what is still held back: less than one subnormal step.
      EXPECT_NEAR(sent, steps * g, std::ldexp(1.0, -9)) << "sent " << sent << " of " << steps * g;
      EXPECT_GT(sent, 0.5 * steps * g);
    }
  }
}

// A step whose gradient holds NaN or inf (the trainer skips it) must not leave a non-finite
// residual behind: it would be added to every later gradient and skip every later step.
TEST(ErrorFeedback, ANonFiniteStepLeavesNoNonFiniteResidual) {
  BucketScaling::FormatScaling f;
  f.format = precision::FloatFormat::preset("e4m3");
  f.errorFeedback = true;
  BucketScaling* scaling = nullptr;
  const auto out = run(
      2, 3, 8,
      [step = 0](int rank, int64_t i) mutable {
        const bool poisoned = step++ < 16 && rank == 0 && i == 3;  // the first step's value 3 on rank 0
        return poisoned ? std::numeric_limits<float>::quiet_NaN() : 0.3f;
      },
      f, &scaling);
  EXPECT_TRUE(std::isnan(out[0][0][3]));
  for (size_t s = 1; s < out.size(); ++s) {
    for (float v : out[s][0]) EXPECT_TRUE(std::isfinite(v)) << "step " << s;
  }
  for (int rank = 0; rank < 2; ++rank) {
    for (float r : scaling->residual(rank, 0)) EXPECT_TRUE(std::isfinite(r));
  }
}

TEST(ErrorFeedback, KeepsEachSimulatedRanksOwnResidual) {
  const precision::FloatFormat e4m3 = precision::FloatFormat::preset("e4m3");
  BucketScaling::FormatScaling f;
  f.format = e4m3;
  f.errorFeedback = true;
  BucketScaling* scaling = nullptr;
  // Rank 0 sends 1.0625 (rounds to 1: residual 0.0625), rank 1 sends 0.
  run(
      2, 1, 4, [](int rank, int64_t) { return rank == 0 ? 1.0625f : 0.0f; }, f, &scaling);
  EXPECT_EQ(scaling->residual(0, 0), std::vector<float>(4, 0.0625f));
  EXPECT_EQ(scaling->residual(1, 0), std::vector<float>(4, 0.0f));
}

// Under APS the residual is what quantizing the scaled gradient lost, back in gradient units:
// APS leaves its shift to the reduction, and the buffers are scaled before error feedback
// reads them. Rank 0 sends 1.0625 * 2^-20: scaled into e4m3's range it rounds to 1 * 2^-20
// (a tie, to even), a residual of 2^-24; unscaled, e4m3 would flush all of it.
TEST(ErrorFeedback, UnderApsTheResidualIsWhatTheScaledGradientLost) {
  const precision::FloatFormat e4m3 = precision::FloatFormat::preset("e4m3");
  BucketScaling::FormatScaling f;
  f.format = e4m3;
  f.errorFeedback = true;
  f.scaler = std::make_shared<precision::ApsScaler>(e4m3, 2, precision::ScalingMode::Aps);
  BucketScaling* scaling = nullptr;
  const float sent = 1.0625f * std::ldexp(1.0f, -20);
  const auto out = run(
      2, 1, 64, [&](int rank, int64_t) { return rank == 0 ? sent : 0.0f; }, f, &scaling);
  EXPECT_GT(scaling->lastShift(0), 20);
  EXPECT_EQ(scaling->residual(0, 0), std::vector<float>(64, std::ldexp(1.0f, -24)));
  EXPECT_EQ(scaling->residual(1, 0), std::vector<float>(64, 0.0f));
  EXPECT_EQ(out[0][0][0], std::ldexp(1.0f, -21));  // the mean of 2^-20 and 0
}

// The chain's state is its hooks' own entries: the statistics windows and each local rank's
// residuals. A fresh chain that loads them holds the same residuals and windows, and one that
// is given no residuals keeps them at zero.
TEST(ErrorFeedback, TheChainSavesAndLoadsItsHooksState) {
  BucketScaling::FormatScaling f;
  f.format = precision::FloatFormat::preset("e4m3");
  f.errorFeedback = true;
  BucketScaling* scaling = nullptr;
  run(
      2, 3, 4, [](int rank, int64_t i) { return rank == 0 ? 1.0625f : 0.3f + 0.01f * static_cast<float>(i); }, f,
      &scaling);
  const NamedTensors state = scaling->stateDict();
  std::vector<std::string> names;
  for (const auto& entry : state) names.push_back(entry.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"statistics", "statistics_out", "residual_sizes", "residual.0", "residual.1"}));
  BucketScaling loaded({f}, 1, 4, 2);
  loaded.loadStateDict(state);
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(loaded.residual(rank, 0), scaling->residual(rank, 0)) << rank;
  EXPECT_EQ(loaded.residual(0, 0), std::vector<float>(4, 0.0625f));
  EXPECT_EQ(loaded.statistics(0).total, scaling->statistics(0).total);
  EXPECT_GT(loaded.statistics(0).total, 0);
  EXPECT_EQ(loaded.stateDict().at(0).tensor.toVector<int64_t>(), state.at(0).tensor.toVector<int64_t>());

  BucketScaling fresh({f}, 1, 4, 2);
  fresh.loadStateDict({state.at(0), state.at(1)});  // no residuals: they stay at zero (empty)
  EXPECT_TRUE(fresh.residual(0, 0).empty());
  NamedTensors short1 = state;
  short1.pop_back();  // local rank 1's residuals missing
  EXPECT_THROW(BucketScaling({f}, 1, 4, 2).loadStateDict(short1), Error);
}

TEST(Fp8LmAutoscale, MuAloneHalvesUntilNothingSaturatesThenAveragesExactly) {
  const precision::FloatFormat e4m3 = precision::FloatFormat::preset("e4m3");
  BucketScaling::FormatScaling f;
  f.format = e4m3;
  precision::Fp8LmScaler::Options muAlone;
  muAlone.perTensor = false;
  f.autoscaler = std::make_shared<precision::Fp8LmScaler>(e4m3, 2, muAlone);
  Rng rng(3);
  std::vector<float> values(4096);
  for (float& v : values) v = 2000.0f * rng.normal();  // far beyond e4m3's max (448)
  const auto out = run(
      2, 12, 4096, [&](int rank, int64_t i) { return values[static_cast<size_t>(i)] * (rank + 1); }, f);
  const double mu = f.autoscaler->state().mu;
  EXPECT_LT(mu, 1.0 / 16);  // halved on every saturating step
  EXPECT_EQ(f.autoscaler->state().step, 12);
  // The last step's mean is 1.5 * value within two e4m3 roundings (each rank's value, then
  // the sum: 2^-4 relative each) where the value is not tiny: nothing is clipped at the max.
  double worst = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double exact = 1.5 * values[i];
    if (std::fabs(exact) < 1.0) continue;
    worst = std::max(worst, std::fabs(out.back()[0][i] - exact) / std::fabs(exact));
  }
  EXPECT_LT(worst, 0.13);
  EXPECT_EQ(out.back()[0], out.back()[1]);
}

// FP8-LM as published: gradients far below e4m3's range (all flushed when sent raw) and far
// above it (all saturated) arrive within two e4m3 roundings, because each tensor is scaled by
// its amax over all ranks (here rank 3's) with room for the 4-way sum (1/sqrt(4), then mu).
TEST(Fp8LmAutoscale, PerTensorAmaxScaleKeepsTinyAndHugeGradients) {
  const precision::FloatFormat e4m3 = precision::FloatFormat::preset("e4m3");
  Rng rng(5);
  std::vector<float> values(2048);
  for (float& v : values) v = rng.normal();
  for (float magnitude : {1e-7f, 1e6f}) {
    BucketScaling::FormatScaling f;
    f.format = e4m3;
    f.autoscaler = std::make_shared<precision::Fp8LmScaler>(e4m3, 4);
    const auto out = run(
        4, 3, 2048, [&](int rank, int64_t i) { return magnitude * values[static_cast<size_t>(i)] * (rank + 1); }, f);
    double worst = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const double exact = 2.5 * magnitude * values[i];  // the mean of 1x .. 4x
      if (std::fabs(values[i]) < 0.05) continue;         // far below the amax: subnormal in e4m3
      worst = std::max(worst, std::fabs(out.back()[0][i] - exact) / std::fabs(exact));
    }
    EXPECT_LT(worst, 0.13) << magnitude;
    EXPECT_EQ(out.back()[0], out.back()[3]);
    // The coherent 4-way sum may exceed the max where 1/sqrt(4) leaves too little room: mu then
    // halves once, and the later steps fit.
    EXPECT_LE(f.autoscaler->state().mu, std::exp2(3 / 1000.0) + 1e-9) << magnitude;
    EXPECT_GE(f.autoscaler->state().mu, 0.5) << magnitude;
  }
}

// An overflow of the coherent sum into e4m3's NaN skips the step; even when it is one value in
// hundreds of thousands (below the 0.001% threshold) mu must halve, or every later step overflows
// and is skipped too (as 196 steps in a row of a 64-rank sweep run did before this rule).
TEST(Fp8LmAutoscale, AnOverflowIntoNanHalvesMuBelowTheSaturationThreshold) {
  const precision::FloatFormat e4m3 = precision::FloatFormat::preset("e4m3");
  BucketScaling::FormatScaling f;
  f.format = e4m3;
  f.autoscaler = std::make_shared<precision::Fp8LmScaler>(e4m3, 4);
  const int64_t n = 32768;  // one overflow in n * (4 + 1) counted values: 6e-6 < 1e-5
  // amax 1 scales by 2^8 / sqrt(4) = 128: the four coherent 128s sum to 512 > 448 (NaN in e4m3).
  const auto out = run(
      4, 3, n, [](int, int64_t i) { return i == 0 ? 1.0f : 0.001f; }, f);
  EXPECT_TRUE(std::isnan(out[0][0][0]));
  EXPECT_TRUE(std::isfinite(out[1][0][0]));  // mu = 1/2: the sum is 256
  EXPECT_FLOAT_EQ(out[1][0][0], 1.0f);
  EXPECT_DOUBLE_EQ(f.autoscaler->state().mu, 0.5 * std::exp2(2 / 1000.0));
}

}  // namespace
}  // namespace aps::comm
