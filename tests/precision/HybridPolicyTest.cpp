#include "precision/HybridPolicy.h"

#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "precision/ApsScaler.h"
#include "precision/Quantizer.h"

#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <vector>

namespace aps::precision {
namespace {

TEST(HybridPolicy, GlobPatternsFirstMatchWins) {
  EXPECT_TRUE(HybridPolicy::globMatch("layer*.conv?.weight", "layer3.conv2.weight"));
  EXPECT_FALSE(HybridPolicy::globMatch("layer*.conv?.weight", "layer3.conv2.bias"));
  EXPECT_TRUE(HybridPolicy::globMatch("*", ""));
  EXPECT_TRUE(HybridPolicy::globMatch("*bn*", "layer1.0.bn1.weight"));
  const auto policy = HybridPolicy::fromYaml(YAML::Load(R"(
default: e4m3
layers:
  - {pattern: "fc.*", format: fp16}
  - {pattern: "*.bias", format: bf16}
  - {pattern: "fc.bias", format: e5m2}
)"));
  EXPECT_EQ(policy.match("fc.bias").name, "fp16");  // the first rule wins over the later, more specific one
  EXPECT_EQ(policy.match("conv1.bias").name, "bf16");
  EXPECT_EQ(policy.match("conv1.weight").name, "e4m3");
  EXPECT_ERROR_NAMES(HybridPolicy::fromYaml(YAML::Load("{defualt: e4m3}")), "defualt");
}

TEST(HybridPolicy, WideningClimbsTheLadder) {
  EXPECT_EQ(HybridPolicy::widen(FloatFormat::preset("e2m1")).name, "e3m0");
  EXPECT_EQ(HybridPolicy::widen(FloatFormat::preset("e3m0")).name, "e4m3");
  EXPECT_EQ(HybridPolicy::widen(FloatFormat::preset("e4m3")).name, "e5m2");
  EXPECT_EQ(HybridPolicy::widen(FloatFormat::preset("e4m3_ieee")).name, "e4m3");  // 448 > 240
  EXPECT_EQ(HybridPolicy::widen(FloatFormat::preset("e5m2")).name, "bf16");
  EXPECT_EQ(HybridPolicy::widen(FloatFormat::preset("fp16")).name, "bf16");
  EXPECT_EQ(HybridPolicy::widen(FloatFormat::preset("bf16")).name, "fp32");
  EXPECT_EQ(HybridPolicy::widen(FloatFormat::preset("fp32")).name, "fp32");
}

// Flushed-to-zero counts of one APS-scaled, quantized layer whose values span 2^-24..1.
QuantizationCounts quantizeWideLayer(const FloatFormat& format, Rng& rng) {
  std::vector<float> g(4096);
  for (auto& v : g) v = std::ldexp(rng.uniform() + 0.5f, -static_cast<int>(rng.below(24)));
  const ApsScaler scaler(format, 8, ScalingMode::Aps);
  const auto shift = scaler.shifts({{g.data(), 4096}}, nullptr).shift[0];
  std::vector<float> scaled(g.size()), q(g.size());
  scaleByPowerOfTwo(g.data(), scaled.data(), 4096, shift);
  Quantizer(format).quantize(scaled.data(), q.data(), 4096, RoundingMode::NearestEven);
  return QuantizationCounts::measure(scaled.data(), q.data(), 4096, format.maxValue());
}

TEST(HybridPolicy, AutoRuleWidensLayersThatUnderflowAndKeepsTheOthers) {
  HybridPolicy policy(FloatFormat::preset("e4m3"), {{"fc.*", FloatFormat::preset("fp16")}}, {true, 0.01, 1e-4});
  policy.assign({"conv.weight", "fc.weight"});
  LayerStatistics stats(2, 4);
  Rng rng(1);
  std::vector<size_t> widened;
  double firstFlush = 0.0;
  for (int step = 0; step < 4; ++step) {
    const auto c = quantizeWideLayer(policy.formatOf(0), rng);
    if (step == 0) firstFlush = c.flushedFraction();
    stats.record(0, c);
    stats.record(1, quantizeWideLayer(policy.formatOf(1), rng));
    widened = policy.adapt(stats);
    if (step < 3) {
      EXPECT_TRUE(widened.empty()) << "no decision before a full window";
    }
  }
  EXPECT_GT(firstFlush, 0.01);  // e4m3 spans 2^-9..448: values 2^-24 below the max flush
  ASSERT_EQ(widened, std::vector<size_t>{0});
  EXPECT_EQ(policy.formatOf(0).name, "e5m2");
  EXPECT_EQ(policy.formatOf(1).name, "fp16");  // fp16 holds 2^-24..1 after the shift: kept
  EXPECT_EQ(stats.steps(0), 0);                // the widened layer's window restarts
  const auto after = quantizeWideLayer(policy.formatOf(0), rng);
  EXPECT_LT(after.flushedFraction(), firstFlush);
  // Disabled: nothing changes.
  HybridPolicy fixed(FloatFormat::preset("e4m3"));
  fixed.assign({"a", "b"});
  for (int i = 0; i < 4; ++i) stats.record(0, quantizeWideLayer(FloatFormat::preset("e4m3"), rng));
  EXPECT_TRUE(fixed.adapt(stats).empty());
}

}  // namespace
}  // namespace aps::precision
