// fp16 and bf16 rounding exists on three paths: the tensor storage conversions
// (framework/tensor/HalfFloat.h), the compute-precision emulation (framework/numerics/FormatRounding.h,
// on every op output under precision.compute, and on 16-bit weights after each update) and the
// wire codecs (precision/Quantizer.h, on every gradient sent as fp16 or bf16). A gradient
// rounded for the wire and a weight rounded for storage must agree, so this checks that every
// path gives the same bits for nearest-even rounding, on every 16-bit-relevant neighbourhood of
// float (a stride through all 2^32 patterns plus each format's edges), and that stochastic
// rounding's bulk form (the one the optimizer and the wire use) takes element i's draw
// randomBits32(seed, stream, i) to the bits the scalar routine gives for that draw.
#include "framework/tensor/HalfFloat.h"
#include "precision/FloatFormat.h"
#include "framework/core/Rng.h"
#include "framework/numerics/FloatRounding.h"
#include "framework/numerics/FormatRounding.h"
#include "precision/Quantizer.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace aps {
namespace {

using precision::ComputeFormat;
using precision::FloatFormat;
using precision::Quantizer;
using precision::RoundingMode;

// Inputs: a stride through every float bit pattern, and for each format the values around
// its rounding boundaries (halfway points, the largest finite value, the subnormal range).
std::vector<float> inputs() {
  std::vector<float> x;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 2039) x.push_back(std::bit_cast<float>(uint32_t(bits)));
  for (float edge : {65504.0f, 65519.0f, 65520.0f, 65536.0f, 6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f,
                     3.3895314e38f, 3.4028235e38f, 1.1754944e-38f, 9.18355e-41f}) {
    uint32_t b = std::bit_cast<uint32_t>(edge);
    for (uint32_t d = 0; d < 4096; ++d) {
      x.push_back(std::bit_cast<float>(b + d));
      x.push_back(std::bit_cast<float>(b - d));
      x.push_back(-std::bit_cast<float>(b + d));
    }
  }
  for (float special : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()}) {
    x.push_back(special);
  }
  return x;
}

bool sameBits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(RoundingAgreement, Fp16NearestEvenIsTheSameOnEveryPath) {
  const Quantizer wire(FloatFormat::preset("fp16"));
  int64_t checked = 0;
  for (float v : inputs()) {
    const float storage = halfBitsToFloat(floatToHalfBits(v));
    const float compute = precision::roundNearestEven(v, ComputeFormat::Fp16);
    const float codec = wire.quantize(v, RoundingMode::NearestEven);
    ASSERT_TRUE(sameBits(storage, compute)) << std::hexfloat << v << ": storage " << storage << ", compute " << compute;
    ASSERT_TRUE(sameBits(storage, codec)) << std::hexfloat << v << ": storage " << storage << ", wire " << codec;
    ++checked;
  }
  EXPECT_GT(checked, 2000000);
}

TEST(RoundingAgreement, Bf16NearestEvenIsTheSameOnEveryPath) {
  const Quantizer wire(FloatFormat::preset("bf16"));
  for (float v : inputs()) {
    const float storage = bfloat16BitsToFloat(floatToBFloat16Bits(v));
    const float compute = precision::roundNearestEven(v, ComputeFormat::BFloat16);
    const float codec = wire.quantize(v, RoundingMode::NearestEven);
    ASSERT_TRUE(sameBits(storage, compute)) << std::hexfloat << v << ": storage " << storage << ", compute " << compute;
    ASSERT_TRUE(sameBits(storage, codec)) << std::hexfloat << v << ": storage " << storage << ", wire " << codec;
  }
}

// The compute emulation's rounding parameters (framework/numerics, below the engine) are the
// wire's for the same formats, field by field.
TEST(RoundingAgreement, SixteenBitParametersAreTheWireFormats) {
  for (ComputeFormat format : {ComputeFormat::Fp16, ComputeFormat::BFloat16}) {
    const Quantizer::Params wire =
        Quantizer(FloatFormat::preset(format == ComputeFormat::Fp16 ? "fp16" : "bf16")).params();
    const Quantizer::Params compute = precision::kernels::sixteenBitParams(format);
    const char* name = precision::computeFormatName(format);
    EXPECT_EQ(compute.mantissaBits, wire.mantissaBits) << name;
    EXPECT_EQ(compute.minExponent, wire.minExponent) << name;
    EXPECT_EQ(compute.biasMinusOne, wire.biasMinusOne) << name;
    EXPECT_EQ(compute.subnormals, wire.subnormals) << name;
    EXPECT_EQ(compute.maxFiniteCode, wire.maxFiniteCode) << name;
    EXPECT_EQ(compute.overflowCode, wire.overflowCode) << name;
    EXPECT_EQ(compute.nanCode, wire.nanCode) << name;
    EXPECT_EQ(compute.signShift, wire.signShift) << name;
    EXPECT_EQ(compute.maxValueBits, wire.maxValueBits) << name;
    EXPECT_EQ(compute.overflowValueBits, wire.overflowValueBits) << name;
    EXPECT_EQ(compute.nanValueBits, wire.nanValueBits) << name;
  }
}

TEST(RoundingAgreement, StochasticBulkAndScalarTakeTheSameDraw) {
  const std::vector<float> x = inputs();
  for (ComputeFormat format : {ComputeFormat::Fp16, ComputeFormat::BFloat16}) {
    const Quantizer wire(FloatFormat::preset(format == ComputeFormat::Fp16 ? "fp16" : "bf16"));
    std::vector<float> bulk = x;
    precision::roundStochastic(bulk.data(), static_cast<int64_t>(bulk.size()), format, 99, 5);
    std::vector<float> wireBulk(x.size());
    wire.quantize(x.data(), wireBulk.data(), static_cast<int64_t>(x.size()), RoundingMode::Stochastic, {99, 5, 0});
    for (size_t i = 0; i < x.size(); ++i) {
      const uint32_t draw = randomBits32(99, 5, i);
      const float scalar = precision::roundStochastic(x[i], format, draw);
      ASSERT_TRUE(sameBits(bulk[i], scalar)) << std::hexfloat << x[i] << ": bulk " << bulk[i] << ", scalar " << scalar;
      ASSERT_TRUE(sameBits(wireBulk[i], scalar))
          << std::hexfloat << x[i] << ": wire " << wireBulk[i] << ", compute " << scalar;
      // Every result is one of the two neighbours nearest-even chooses between.
      if (std::isfinite(x[i]) && std::isfinite(scalar)) {
        const float ne = precision::roundNearestEven(x[i], format);
        ASSERT_TRUE(scalar == ne || (scalar - x[i]) * (ne - x[i]) <= 0.0f) << std::hexfloat << x[i];
      }
    }
  }
}

}  // namespace
}  // namespace aps
