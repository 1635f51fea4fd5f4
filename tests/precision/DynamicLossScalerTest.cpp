#include "precision/DynamicLossScaler.h"

#include "framework/core/Error.h"
#include "framework/numerics/FormatRounding.h"

#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <bit>

#include <limits>

namespace {

using aps::NamedTensors;
using aps::Tensor;
using aps::precision::DynamicLossScaler;

TEST(DynamicLossScaler, GrowsAfterIntervalAndBacksOffOnNonFinite) {
  DynamicLossScaler scaler({.initialScale = 1024.0, .growthInterval = 3});
  EXPECT_EQ(scaler.scale(), 1024.0f);
  EXPECT_EQ(scaler.rootGradient().item(), 1024.0f);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 1024.0f);
  EXPECT_TRUE(scaler.update(true));  // third good step in a row: x2
  EXPECT_EQ(scaler.scale(), 2048.0f);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_FALSE(scaler.update(false));  // skip, x0.5, and the count of good steps restarts
  EXPECT_EQ(scaler.scale(), 1024.0f);
  EXPECT_EQ(scaler.state().skippedSteps, 1);
  EXPECT_EQ(scaler.state().goodSteps, 0);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 1024.0f);
}

TEST(DynamicLossScaler, DefaultsAreGradScalers) {
  DynamicLossScaler scaler;
  EXPECT_EQ(scaler.scale(), 65536.0f);
  for (int i = 0; i < 1999; ++i) scaler.update(true);
  EXPECT_EQ(scaler.scale(), 65536.0f);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 131072.0f);
}

TEST(DynamicLossScaler, StaysWithinBounds) {
  DynamicLossScaler scaler({.initialScale = 4.0, .growthInterval = 1, .minScale = 2.0, .maxScale = 8.0});
  for (int i = 0; i < 5; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 2.0f);
  for (int i = 0; i < 5; ++i) scaler.update(true);
  EXPECT_EQ(scaler.scale(), 8.0f);
  EXPECT_THROW(DynamicLossScaler({.initialScale = 16.0, .maxScale = 8.0}), aps::Error);
  EXPECT_THROW(DynamicLossScaler({.backoffFactor = 1.5}), aps::Error);
}

TEST(DynamicLossScaler, StateRoundTripsThroughItsStateDict) {
  DynamicLossScaler scaler({.initialScale = 3.0 * 1024.0, .growthInterval = 5});
  scaler.update(false);
  scaler.update(true);
  scaler.update(true);
  const NamedTensors state = scaler.stateDict();
  DynamicLossScaler resumed({.growthInterval = 5});
  resumed.loadStateDict(state);
  EXPECT_EQ(resumed.state(), scaler.state());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(resumed.update(true), scaler.update(true));
  EXPECT_EQ(resumed.state(), scaler.state());
  const std::vector<int64_t> zero{0, 1, 1}, negative{std::bit_cast<int64_t>(2.0), -1, 0};
  EXPECT_ERROR_NAMES(resumed.loadStateDict({{"loss_scale", Tensor::fromVector(std::span<const int64_t>(zero), {3})}}),
                     "loss_scale");
  EXPECT_ERROR_NAMES(
      resumed.loadStateDict({{"loss_scale", Tensor::fromVector(std::span<const int64_t>(negative), {3})}}),
      "good steps -1");
  EXPECT_ERROR_NAMES(resumed.loadStateDict({{"loss_scale", Tensor::ones({3})}}), "must be 3 int64");
  EXPECT_ERROR_NAMES(resumed.loadStateDict({}), "no 'loss_scale'");
  EXPECT_EQ(resumed.state(), scaler.state());  // a refused state changes nothing
}

TEST(DynamicLossScaler, UnscalesRoundsAndDetectsNonFinite) {
  Tensor w = Tensor::zeros({3}).setRequiresGrad();
  NamedTensors params{{"w", w}};
  DynamicLossScaler scaler({.initialScale = 1024.0});
  w.setGrad(Tensor::fromVector({1024.0f, 3.0f, -0x1p-20f}, {3}));
  EXPECT_TRUE(scaler.unscaleGradients(params, aps::precision::ComputeFormat::Fp32));
  EXPECT_EQ(w.grad().toFloatVector(), (std::vector<float>{1.0f, 3.0f / 1024.0f, -0x1p-30f}));
  // Pure fp16: the unscaled gradient is 16-bit too (2^-30 is below fp16's smallest subnormal).
  w.setGrad(Tensor::fromVector({1024.0f, 3.0f, -0x1p-20f}, {3}));
  EXPECT_TRUE(scaler.unscaleGradients(params, aps::precision::ComputeFormat::Fp16));
  EXPECT_EQ(w.grad().toFloatVector(), (std::vector<float>{1.0f, 3.0f / 1024.0f, -0.0f}));
  w.setGrad(Tensor::fromVector({1.0f, std::numeric_limits<float>::infinity(), 0.0f}, {3}));
  EXPECT_FALSE(DynamicLossScaler::gradientsFinite(params));
  EXPECT_FALSE(scaler.unscaleGradients(params, aps::precision::ComputeFormat::Fp16));
  w.setGrad(Tensor::fromVector({1.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f}, {3}));
  EXPECT_FALSE(scaler.unscaleGradients(params, aps::precision::ComputeFormat::Fp32));
}

}  // namespace
