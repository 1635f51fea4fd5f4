#include "precision/FloatFormat.h"
#include "tests/common/ErrorMessage.h"

#include "framework/core/Error.h"
#include "framework/numerics/RoundingMode.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <string>

namespace aps::precision {
namespace {

TEST(FloatFormat, PresetsMatchTheStandards) {
  // docs/ALGORITHMS.md, Float formats.
  const auto e4m3 = FloatFormat::preset("e4m3");
  EXPECT_EQ(e4m3.maxValue(), 448.0f);
  EXPECT_EQ(e4m3.minNormal(), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3.minSubnormal(), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3.finiteCount(), 254);
  EXPECT_TRUE(std::isnan(e4m3.decode(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3.decode(0xff)));
  EXPECT_EQ(e4m3.decode(0x78), 256.0f);  // S.1111.000 is finite in OCP E4M3
  const auto e5m2 = FloatFormat::preset("e5m2");
  EXPECT_EQ(e5m2.maxValue(), 57344.0f);
  EXPECT_EQ(e5m2.minNormal(), std::ldexp(1.0f, -14));
  EXPECT_EQ(e5m2.minSubnormal(), std::ldexp(1.0f, -16));
  EXPECT_EQ(e5m2.finiteCount(), 248);
  EXPECT_TRUE(std::isinf(e5m2.decode(0x7c)));
  EXPECT_EQ(FloatFormat::preset("e4m3_ieee").maxValue(), 240.0f);
  EXPECT_EQ(FloatFormat::preset("fp16").maxValue(), 65504.0f);
  EXPECT_EQ(FloatFormat::preset("fp16").minSubnormal(), std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatFormat::preset("fp16").finiteCount(), 63488);
  EXPECT_EQ(FloatFormat::preset("bf16").maxValue(), 0x1.fep127f);
  EXPECT_EQ(FloatFormat::preset("bf16").minSubnormal(), std::ldexp(1.0f, -133));
  EXPECT_EQ(FloatFormat::preset("e2m1").maxValue(), 6.0f);
  EXPECT_EQ(FloatFormat::preset("e2m1").minSubnormal(), 0.5f);
  EXPECT_EQ(FloatFormat::preset("e2m1").finiteCount(), 16);
  EXPECT_EQ(FloatFormat::preset("e3m0").maxValue(), 8.0f);
  EXPECT_EQ(FloatFormat::preset("e3m0").minNormal(), 0.25f);
  EXPECT_EQ(FloatFormat::preset("fp32").maxValue(), 0x1.fffffep127f);
  EXPECT_EQ(FloatFormat::preset("fp32").minSubnormal(), 0x1p-149f);
}

TEST(FloatFormat, CustomFromYamlAndOverrides) {
  const auto node = YAML::Load("{exponent_bits: 3, mantissa_bits: 2, subnormals: false, overflow: saturate}");
  const auto f = FloatFormat::fromYaml(node);
  EXPECT_EQ(f.bias, 3);
  EXPECT_FALSE(f.subnormals);
  EXPECT_EQ(f.overflow, Overflow::Saturate);
  EXPECT_EQ(f.maxValue(), 14.0f);  // 1.75 * 2^3, all-ones exponent reserved (ieee)
  EXPECT_EQ(f.minSubnormal(), 0.25f);
  const auto sat = FloatFormat::fromYaml(YAML::Load("{preset: e4m3, overflow: saturate}"));
  EXPECT_EQ(sat.maxValue(), 448.0f);
  EXPECT_EQ(sat.overflow, Overflow::Saturate);
  EXPECT_EQ(FloatFormat::fromYaml(YAML::Load("e5m2")), FloatFormat::preset("e5m2"));
  EXPECT_EQ(sat.name, "e4m3_sat");
  EXPECT_EQ(f.name, "e3m2_nosub_sat");
  EXPECT_EQ(FloatFormat::fromMap({{"preset", "e4m3"}}).name, "e4m3");
  EXPECT_EQ(FloatFormat::fromMap({{"exponent_bits", "4"}, {"mantissa_bits", "3"}, {"bias", "8"}}).name, "e4m3_b8");
}

using aps::testsupport::errorOf;

TEST(FloatFormat, ImpossibleFormatsAreRejectedNamingKeyAndValue) {
  auto msg = errorOf([] { FloatFormat::fromMap({{"exponent_bits", "9"}, {"mantissa_bits", "2"}}); });
  EXPECT_NE(msg.find("exponent_bits = 9"), std::string::npos) << msg;
  msg = errorOf([] { FloatFormat::fromMap({{"exponent_bits", "4"}, {"mantissa_bits", "24"}}); });
  EXPECT_NE(msg.find("mantissa_bits = 24"), std::string::npos) << msg;
  msg = errorOf([] { FloatFormat::fromMap({{"exponent_bits", "8"}, {"mantissa_bits", "7"}, {"bias", "200"}}); });
  EXPECT_NE(msg.find("bias = 200"), std::string::npos) << msg;
  msg = errorOf([] { FloatFormat::fromMap({{"exponent_bits", "8"}, {"mantissa_bits", "7"}, {"bias", "-3"}}); });
  EXPECT_NE(msg.find("bias = -3"), std::string::npos) << msg;
  msg = errorOf([] { FloatFormat::fromMap({{"exponent_bits", "1"}, {"mantissa_bits", "2"}}); });
  EXPECT_NE(msg.find("no normal values"), std::string::npos) << msg;
  msg = errorOf([] { FloatFormat::preset("e9m9"); });
  EXPECT_NE(msg.find("'e9m9'"), std::string::npos) << msg;
  msg = errorOf([] { FloatFormat::fromMap({{"exponent_bits", "x4"}, {"mantissa_bits", "2"}}); });
  EXPECT_NE(msg.find("exponent_bits = 'x4'"), std::string::npos) << msg;
  msg = errorOf([] { FloatFormat::fromMap({{"preset", "e4m3"}, {"specials", "maybe"}}); });
  EXPECT_NE(msg.find("specials = 'maybe'"), std::string::npos) << msg;
  msg = errorOf([] { FloatFormat::fromMap({{"preset", "e4m3"}, {"mantisa_bits", "3"}}); });
  EXPECT_NE(msg.find("'mantisa_bits'"), std::string::npos) << msg;
  msg = errorOf([] { FloatFormat::fromMap({{"preset", "e2m1"}, {"overflow", "inf"}}); });
  EXPECT_NE(msg.find("overflow = inf"), std::string::npos) << msg;
  msg = errorOf([] { parseRoundingMode("banana"); });
  EXPECT_NE(msg.find("rounding = 'banana'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace aps::precision
