#include "precision/ApsScaler.h"

#include "framework/core/Rng.h"
#include "precision/Quantizer.h"
#include "precision/kernels/Scaling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

namespace aps::precision {
namespace {

TEST(ApsScaler, LocalExponentIsCeilLog2OfNTimesMax) {
  const ApsScaler scaler(FloatFormat::preset("e4m3_ieee"), 4, ScalingMode::Aps);
  std::vector<float> a = {0.5f, -1.0f}, b = {0.75f}, c = {3.0f, 0.0f}, z = {0.0f, -0.0f},
                     bad = {1.0f, std::numeric_limits<float>::quiet_NaN()}, tiny = {0x1p-149f};
  const auto e = scaler.localExponents(
      {{a.data(), 2}, {b.data(), 1}, {c.data(), 2}, {z.data(), 2}, {bad.data(), 2}, {tiny.data(), 1}});
  EXPECT_EQ(e[0], 2.0f);  // 4 * 1 = 2^2
  EXPECT_EQ(e[1], 2.0f);  // 4 * 0.75 = 3 -> 2
  EXPECT_EQ(e[2], 4.0f);  // 12 -> 4
  EXPECT_EQ(e[3], ApsScaler::kZeroExponent);
  EXPECT_TRUE(std::isinf(e[4]) && e[4] > 0);
  EXPECT_EQ(e[5], -147.0f);            // 4 * 2^-149
  EXPECT_EQ(scaler.maxExponent(), 7);  // 240 = 1.875 * 2^7
}

// The copy that measures on the way: the values copied bit for bit, the largest |bits| (the
// sign ignored, a NaN or an infinity above every finite value), and the exponents from it
// those of localExponents.
TEST(ApsScaler, CopyMaxAbsBitsCopiesAndMeasuresWhatLocalExponentsReads) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> layers{{0.5f, -3.0f, 2.0f}, {-0.0f, 0.0f}, {1.0f, nan, -2.0f},
                                               {-inf, 1.0f},        {0x1p-149f},   {}};
  const ApsScaler scaler(FloatFormat::preset("e4m3"), 8, ScalingMode::Aps);
  std::vector<uint32_t> maxBits;
  std::vector<LayerGradient> views;
  for (const auto& layer : layers) {
    std::vector<float> copy(layer.size() + 1, 7.0f);  // one value past the end, left alone
    maxBits.push_back(copyMaxAbsBits(copy.data(), layer.data(), static_cast<int64_t>(layer.size())));
    for (size_t i = 0; i < layer.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(copy[i]), std::bit_cast<uint32_t>(layer[i]));
    EXPECT_EQ(copy.back(), 7.0f);
    views.push_back({layer.data(), static_cast<int64_t>(layer.size())});
  }
  EXPECT_EQ(maxBits[0], std::bit_cast<uint32_t>(3.0f));
  EXPECT_EQ(maxBits[1], 0u);
  EXPECT_GT(maxBits[2], 0x7f800000u);
  EXPECT_EQ(maxBits[3], 0x7f800000u);
  EXPECT_EQ(maxBits[4], 1u);
  EXPECT_EQ(maxBits[5], 0u);
  EXPECT_EQ(scaler.exponentsOfMaxBits(maxBits), scaler.localExponents(views));
  // Long enough for the vector loop and its tail.
  Rng rng(5);
  std::vector<float> big(1000), copy(1000);
  for (auto& v : big) v = rng.normal(0.0f, 1.0f);
  big[777] = -9.5f;
  EXPECT_EQ(copyMaxAbsBits(copy.data(), big.data(), 1000), std::bit_cast<uint32_t>(9.5f));
  EXPECT_EQ(copy, big);
}

// A MaxReduce that stands in for the all-reduce over simulated ranks: it replaces the
// caller's values with the element-wise max of every rank's contribution.
struct SimulatedMax {
  std::vector<std::vector<float>> contributions;
  MaxReduce reducer() {
    return [this](float* v, int64_t n) {
      for (const auto& c : contributions) {
        for (int64_t i = 0; i < n; ++i) v[i] = std::max(v[i], c[i]);
      }
    };
  }
};

// Simulates N ranks: random gradients per layer, APS shifts, scaled and quantized values
// summed in rank order in the format (rounding after every add, as the APS artifact).
// Returns the number of non-finite or above-max sums.
int64_t simulateOverflows(const FloatFormat& format, int ranks, ScalingMode mode, int scalerWorld, Rng& rng) {
  const int layers = 3;
  const int64_t size = 16;
  std::vector<std::vector<std::vector<float>>> grads(ranks, std::vector<std::vector<float>>(layers));
  for (int layer = 0; layer < layers; ++layer) {
    const float layerScale = std::ldexp(1.0f, static_cast<int>(rng.below(60)) - 40);
    for (int r = 0; r < ranks; ++r) {
      // Some ranks (and the same sign everywhere) make the sum as large as it can get.
      const float rankScale = rng.below(4) == 0 ? 1.0f : rng.uniform();
      grads[r][layer].resize(size);
      for (auto& g : grads[r][layer]) g = layerScale * rankScale * (rng.below(8) == 0 ? 1.0f : rng.uniform());
    }
  }
  const ApsScaler scaler(format, scalerWorld, mode);
  SimulatedMax sim;
  std::vector<LayerGradient> mine;
  for (int r = 0; r < ranks; ++r) {
    std::vector<LayerGradient> views;
    for (int layer = 0; layer < layers; ++layer) views.push_back({grads[r][layer].data(), size});
    auto e = scaler.localExponents(views);
    if (mode == ScalingMode::Global) e.assign(1, *std::max_element(e.begin(), e.end()));
    sim.contributions.push_back(e);
    if (r == 0) mine = views;
  }
  const auto shifts = scaler.shifts(mine, sim.reducer());
  const Quantizer q(format);
  int64_t bad = 0;
  for (int layer = 0; layer < layers; ++layer) {
    std::vector<float> sum(size, 0.0f), scaled(size);
    for (int r = 0; r < ranks; ++r) {
      scaleByPowerOfTwo(grads[r][layer].data(), scaled.data(), size, shifts.shift[layer]);
      q.quantize(scaled.data(), scaled.data(), size, RoundingMode::NearestEven);
      for (int64_t i = 0; i < size; ++i) sum[i] = q.quantize(sum[i] + scaled[i]);
    }
    for (float s : sum) bad += !(std::fabs(s) <= format.maxValue());
  }
  return bad;
}

TEST(ApsScaler, NeverOverflowsWithUpTo1024Ranks) {
  Rng rng(2021);
  for (const char* name : {"e4m3_ieee", "e4m3", "e5m2", "e3m0", "e2m1"}) {
    const auto format = FloatFormat::preset(name);
    for (int ranks : {1, 2, 3, 8, 17, 64, 256, 1024}) {
      const int trials = ranks >= 256 ? 3 : 20;
      for (int t = 0; t < trials; ++t) {
        EXPECT_EQ(simulateOverflows(format, ranks, ScalingMode::Aps, ranks, rng), 0) << name << " N=" << ranks;
        EXPECT_EQ(simulateOverflows(format, ranks, ScalingMode::Global, ranks, rng), 0) << name << " N=" << ranks;
      }
    }
  }
}

TEST(ApsScaler, WithoutTheFactorNTheSumOverflows) {
  // The control that shows the test above can fail: headroom for one rank only.
  Rng rng(5);
  int64_t overflows = 0;
  for (int t = 0; t < 10; ++t)
    overflows += simulateOverflows(FloatFormat::preset("e4m3_ieee"), 64, ScalingMode::Aps, 1, rng);
  EXPECT_GT(overflows, 0);
}

TEST(ApsScaler, ZeroAndNonFiniteLayersAreGuarded) {
  const ApsScaler scaler(FloatFormat::preset("e5m2"), 2, ScalingMode::Aps);
  std::vector<float> zero(4, 0.0f), one = {1.0f}, inf = {std::numeric_limits<float>::infinity()};
  SimulatedMax sim;
  sim.contributions = {{ApsScaler::kZeroExponent, 1.0f, 0.0f}};
  const auto s = scaler.shifts({{zero.data(), 4}, {one.data(), 1}, {inf.data(), 1}}, sim.reducer());
  EXPECT_EQ(s.shift[0], 0);       // zero everywhere: nothing to scale
  EXPECT_EQ(s.shift[1], 15 - 1);  // emax 15, e = ceil(log2(2 * 1)) = 1
  EXPECT_TRUE(s.nonFinite[2]);
  EXPECT_EQ(s.shift[2], 0);
  EXPECT_TRUE(s.anyNonFinite);
  // Another rank's nonzero gradient sets the shift of a layer that is zero here.
  sim.contributions = {{5.0f, 1.0f, 0.0f}};
  EXPECT_EQ(scaler.shifts({{zero.data(), 4}, {one.data(), 1}, {one.data(), 1}}, sim.reducer()).shift[0], 10);
  // Mode none never calls the reduction.
  const ApsScaler none(FloatFormat::preset("e5m2"), 2, ScalingMode::None);
  const auto n = none.shifts({{one.data(), 1}}, [](float*, int64_t) { FAIL() << "no reduction expected"; });
  EXPECT_EQ(n.shift[0], 0);
}

TEST(ApsScaler, PowerOfTwoScalingIsExactAndRoundsSubnormalsOnce) {
  Rng rng(9);
  for (int t = 0; t < 100000; ++t) {
    const float x = std::bit_cast<float>(rng.nextU32() & 0xbfffffffu);  // finite, |x| < 2
    const int shift = static_cast<int>(rng.below(400)) - 200;
    float y = x;
    scaleByPowerOfTwo(&y, 1, shift);
    ASSERT_EQ(std::bit_cast<uint32_t>(y), std::bit_cast<uint32_t>(std::ldexp(x, shift))) << x << " " << shift;
  }
  float v = 0x1.2p-140f;
  scaleByPowerOfTwo(&v, 1, 100);
  EXPECT_EQ(v, 0x1.2p-40f);
  // Whole buffers (the vector loops) at every shift from -300 to 300: any finite or non-finite
  // input, subnormal results rounded once, overflow to infinity, as kernels::scaleByPow2 (the
  // double product rounded to float, the CUDA kernels' arithmetic) gives them.
  std::vector<float> xs(1000), ys(1000);
  for (auto& x : xs) x = std::bit_cast<float>(rng.nextU32());
  xs[0] = std::numeric_limits<float>::infinity();
  xs[1] = -0.0f;
  xs[2] = std::numeric_limits<float>::denorm_min();
  for (int shift = -300; shift <= 300; ++shift) {
    scaleByPowerOfTwo(xs.data(), ys.data(), static_cast<int64_t>(xs.size()), shift);
    for (size_t i = 0; i < xs.size(); ++i) {
      const float want = kernels::scaleByPow2(xs[i], shift);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(ys[i])) << xs[i] << " " << shift;
      } else {
        ASSERT_EQ(std::bit_cast<uint32_t>(ys[i]), std::bit_cast<uint32_t>(want)) << xs[i] << " " << shift;
      }
    }
  }
}

// The headroom for N summands costs log2(N) binades of the format's range. A user is warned
// (aps_train) when less than one binade is left: then even a layer's largest scaled value is
// flushed. E3M0 (0.25..8) at 64 ranks: 8 / 64 = 0.125 rounds to 0; at 8 ranks 1.0 survives.
TEST(ApsScaler, UsableBinadesSayWhenTheHeadroomTakesTheWholeRange) {
  const auto e3m0 = FloatFormat::preset("e3m0");
  EXPECT_DOUBLE_EQ(ApsScaler(e3m0, 64, ScalingMode::Aps).usableBinades(), -1.0);
  EXPECT_DOUBLE_EQ(ApsScaler(e3m0, 8, ScalingMode::Aps).usableBinades(), 2.0);
  EXPECT_DOUBLE_EQ(ApsScaler(FloatFormat::preset("e2m1"), 64, ScalingMode::Aps).usableBinades(), -3.0);
  EXPECT_GT(ApsScaler(FloatFormat::preset("e4m3"), 1024, ScalingMode::Aps).usableBinades(), 5.0);
  // The most ranks with one usable binade: where the usable binades reach 1.
  EXPECT_DOUBLE_EQ(ApsScaler::maxRanks(e3m0), 16.0);
  EXPECT_DOUBLE_EQ(ApsScaler(e3m0, 16, ScalingMode::Aps).usableBinades(), 1.0);
  EXPECT_DOUBLE_EQ(ApsScaler::maxRanks(FloatFormat::preset("e2m1")), 4.0);
  const Quantizer q(e3m0);
  for (const int ranks : {8, 64}) {
    const ApsScaler scaler(e3m0, ranks, ScalingMode::Aps);
    std::vector<float> g = {0.3f, -1.7f, 0.01f};
    SimulatedMax sim;
    sim.contributions.push_back(scaler.localExponents({{g.data(), 3}}));
    const auto s = scaler.shifts({{g.data(), 3}}, sim.reducer());
    scaleByPowerOfTwo(g.data(), 3, s.shift[0]);
    q.quantize(g.data(), g.data(), 3, RoundingMode::NearestEven);
    EXPECT_EQ(g[1] == 0.0f, scaler.usableBinades() < 1.0) << ranks << " ranks: largest value " << g[1];
  }
}

}  // namespace
}  // namespace aps::precision
