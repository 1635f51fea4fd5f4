// fp16 and bf16 rounding exists on three paths: the tensor storage conversions
// (framework/tensor/HalfFloat.h), the compute-precision emulation (framework/autograd/
// FormatRounding.h, on every op output under precision.compute) and the wire codecs
// (precision/Quantizer.h, on every gradient sent as fp16 or bf16). A gradient rounded for
// the wire and a weight rounded for storage must agree, so this checks that every path gives
// the same bits for nearest-even rounding, on every 16-bit-relevant neighbourhood of float
// (a stride through all 2^32 patterns plus each format's edges). Stochastic rounding is
// unbiased on both the emulation and the wire path but maps the random bits to the rounding
// decision differently, so the two do not agree draw for draw (yet: unifying them changes the
// bits of every stochastic run, see docs/ARCHITECTURE.md).
#include "framework/tensor/HalfFloat.h"
#include "precision/FloatFormat.h"
#include "precision/FormatRounding.h"
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

}  // namespace
}  // namespace aps
