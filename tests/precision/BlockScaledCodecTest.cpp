// Block scaling and the OCP MX types (precision/BlockScaledCodec.h) against a reference
// written from the definition: X = 2^(floor(log2(amax)) - emax), elements V / X rounded to
// the element format and saturated, one E8M0 byte per block.
#include "precision/BlockScaledCodec.h"
#include "precision/CodecSpec.h"
#include "precision/Quantizer.h"
#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace aps::precision {
namespace {

// The definition, value by value (no shared code with the codec but the element rounding).
std::vector<float> reference(const std::vector<float>& x, FloatFormat element, int64_t blockSize) {
  element.overflow = Overflow::Saturate;
  const Quantizer q(element);
  const int emax = element.maxExponent();
  const auto n = static_cast<int64_t>(x.size());
  const int64_t len = blockSize > 0 ? blockSize : std::max<int64_t>(n, 1);
  std::vector<float> out(x.size());
  for (int64_t begin = 0; begin < n; begin += len) {
    const int64_t end = std::min(n, begin + len);
    double amax = 0;
    bool finite = true;
    for (int64_t i = begin; i < end; ++i) {
      finite = finite && std::isfinite(x[static_cast<size_t>(i)]);
      amax = std::max(amax, std::fabs(static_cast<double>(x[static_cast<size_t>(i)])));
    }
    const int e = amax == 0 ? 0 : std::clamp(std::ilogb(amax) - emax, -127, 127);
    for (int64_t i = begin; i < end; ++i) {
      const auto k = static_cast<size_t>(i);
      out[k] = finite ? static_cast<float>(std::ldexp(static_cast<double>(q.quantize(
                                                          static_cast<float>(std::ldexp(double(x[k]), -e)),
                                                          RoundingMode::NearestEven)),
                                                      e))
                      : std::numeric_limits<float>::quiet_NaN();
    }
  }
  return out;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return false;
    if (!std::isnan(a[i]) && std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return false;
  }
  return true;
}

std::vector<float> roundTrip(const Codec& codec, const std::vector<float>& x) {
  std::vector<uint8_t> wire(codec.encodedBytes(static_cast<int64_t>(x.size())));
  codec.encode(x.data(), static_cast<int64_t>(x.size()), wire.data());
  std::vector<float> y(x.size());
  codec.decode(wire.data(), static_cast<int64_t>(x.size()), y.data());
  return y;
}

// Blocks of very different magnitudes (1e-30 .. 1e30), zeros, a partial last block.
std::vector<float> mixedBlocks(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int block = static_cast<int>(i / 32);
    x[static_cast<size_t>(i)] = block % 5 == 3 ? 0.0f : normal(rng) * std::pow(10.0f, static_cast<float>(block % 13) * 5 - 30);
  }
  return x;
}

TEST(BlockScaledCodec, MxElementTypesAreTheSpecsValues) {
  // OCP MX v1.0, element types: max normal, min normal, min subnormal; no inf or NaN in FP6/FP4.
  struct Expect {
    const char* name;
    float max, minNormal, minSubnormal;
    int emax;
  };
  for (const Expect& e : {Expect{"e4m3", 448.0f, 0x1p-6f, 0x1p-9f, 8}, Expect{"e5m2", 57344.0f, 0x1p-14f, 0x1p-16f, 15},
                          Expect{"e3m2", 28.0f, 0.25f, 0.0625f, 4}, Expect{"e2m3", 7.5f, 1.0f, 0.125f, 2},
                          Expect{"e2m1", 6.0f, 1.0f, 0.5f, 2}}) {
    const FloatFormat f = FloatFormat::preset(e.name);
    EXPECT_EQ(f.maxValue(), e.max) << e.name;
    EXPECT_EQ(f.minNormal(), e.minNormal) << e.name;
    EXPECT_EQ(f.minSubnormal(), e.minSubnormal) << e.name;
    EXPECT_EQ(f.maxExponent(), e.emax) << e.name;
  }
  for (const char* fp6 : {"e3m2", "e2m3"}) {
    const FloatFormat f = FloatFormat::preset(fp6);
    EXPECT_EQ(f.bits(), 6);
    EXPECT_FALSE(f.hasInf());
    EXPECT_FALSE(f.hasNan());
    EXPECT_EQ(f.finiteCount(), 64) << fp6;
  }
}

TEST(BlockScaledCodec, MxPresetsParse) {
  const std::vector<std::pair<std::string, std::string>> mx{
      {"mxfp8_e4m3", "e4m3"}, {"mxfp8_e5m2", "e5m2"}, {"mxfp6_e3m2", "e3m2"}, {"mxfp6_e2m3", "e2m3"}, {"mxfp4", "e2m1"}};
  for (const auto& [name, element] : mx) {
    const CodecSpec spec = CodecSpec::parse(name);
    EXPECT_EQ(spec.kind, CodecSpec::Kind::BlockScaled) << name;
    EXPECT_EQ(spec.format.name, element) << name;
    EXPECT_EQ(spec.blockSize, 32) << name;
    EXPECT_EQ(makeCodec(spec)->name(), element + "/block32");
  }
  EXPECT_EQ(CodecSpec::parse("mxfp4:stochastic").rounding, RoundingMode::Stochastic);
  EXPECT_EQ(CodecSpec::parse("e3m0/block16").blockSize, 16);
  EXPECT_EQ(CodecSpec::parse("e4m3:stochastic/block0").kind, CodecSpec::Kind::BlockScaled);
  EXPECT_EQ(CodecSpec::parse("e4m3").withBlocks(8).blockSize, 8);
  EXPECT_EQ(CodecSpec::parse("fp32").withBlocks(8).kind, CodecSpec::Kind::Float);
  EXPECT_ERROR_NAMES(CodecSpec::parse("mxfp4/block16"), "mxfp4");
  EXPECT_ERROR_NAMES(CodecSpec::parse("e4m3/blk8"), "blk8");
  EXPECT_ERROR_NAMES(CodecSpec::parse("e4m3/block-1"), "-1");
  EXPECT_ERROR_NAMES(CodecSpec::parse("mxfp5"), "mxfp5");
}

TEST(BlockScaledCodec, MatchesTheDefinitionBitForBit) {
  for (const char* element : {"e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "e3m0", "e4m3_ieee", "fp16", "bf16"}) {
    for (int64_t block : {32, 7, 1, 0}) {
      for (int64_t n : {1, 31, 32, 33, 1000}) {
        const auto x = mixedBlocks(n, static_cast<uint64_t>(n + block));
        const BlockScaledCodec codec(FloatFormat::preset(element), RoundingMode::NearestEven, block);
        EXPECT_TRUE(sameBits(roundTrip(codec, x), reference(x, FloatFormat::preset(element), block)))
            << element << " block " << block << " n " << n;
      }
    }
  }
}

TEST(BlockScaledCodec, WireLayoutIsOneE8M0BytePerBlockThenTheElements) {
  const BlockScaledCodec mxfp8(FloatFormat::preset("e4m3"), RoundingMode::NearestEven, 32);
  const BlockScaledCodec mxfp4(FloatFormat::preset("e2m1"), RoundingMode::NearestEven, 32);
  EXPECT_EQ(mxfp8.encodedBytes(1000), 32u + 1000u);
  EXPECT_EQ(mxfp4.encodedBytes(1000), 32u + 500u);
  EXPECT_EQ(mxfp4.encodedBytes(0), 0u);
  // amax 1.0: X = 2^(0 - 8) for E4M3, 2^(0 - 2) for E2M1; 0.75 in a block whose amax is 3.
  std::vector<float> x(64, 0.5f);
  x[5] = -1.0f;
  x[40] = 3.0f;
  x[41] = 0.75f;
  std::vector<uint8_t> wire(mxfp4.encodedBytes(64));
  mxfp4.encode(x.data(), 64, wire.data());
  EXPECT_EQ(wire[0], 127 - 2);
  EXPECT_EQ(wire[1], 127 + 1 - 2);
  EXPECT_EQ(mxfp8.scaleCode(1.0f), 127 - 8);
  EXPECT_EQ(mxfp8.scaleCode(0.0f), 127);
  EXPECT_EQ(mxfp8.scaleCode(std::numeric_limits<float>::infinity()), BlockScaledCodec::kNanScale);
  EXPECT_EQ(mxfp8.scaleCode(0x1p-149f), 0);  // clamped to 2^-127
  std::vector<float> y(64);
  mxfp4.decode(wire.data(), 64, y.data());
  EXPECT_EQ(y[5], -1.0f);
  EXPECT_EQ(y[41], 0.75f);  // 0.75 / 2^-1 = 1.5, an E2M1 value
}

TEST(BlockScaledCodec, EachBlockUsesTheWholeRangeWhereOneScaleFlushes) {
  // Two blocks 1e12 apart: one scale for both (block 0 = per chunk) flushes the small block
  // to zero in E4M3; a scale per block keeps both within E4M3's relative precision (2^-4), or
  // within 2^-3 where the top binade saturates at 448 = 1.75 * 2^8 (values 1.75..2 * 2^(e+8)).
  std::vector<float> x(64);
  for (size_t i = 0; i < 64; ++i) x[i] = (i < 32 ? 1e-6f : 1e6f) * (1.0f + static_cast<float>(i) / 64.0f);
  const auto perBlock = roundTrip(BlockScaledCodec(FloatFormat::preset("e4m3"), RoundingMode::NearestEven, 32), x);
  const auto perChunk = roundTrip(BlockScaledCodec(FloatFormat::preset("e4m3"), RoundingMode::NearestEven, 0), x);
  for (size_t i = 0; i < 64; ++i) EXPECT_NEAR(perBlock[i], x[i], std::fabs(x[i]) / 8) << i;
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(perChunk[i], 0.0f) << i;
}

TEST(BlockScaledCodec, NonFiniteBlocksDecodeToNanAndOthersAreKept) {
  std::vector<float> x(64, 1.0f);
  x[3] = std::numeric_limits<float>::infinity();
  x[40] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y = roundTrip(BlockScaledCodec(FloatFormat::preset("e4m3"), RoundingMode::NearestEven, 16), x);
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(std::isnan(y[i]), i < 16 || (i >= 32 && i < 48)) << i;
  EXPECT_EQ(y[20], 1.0f);
}

TEST(BlockScaledCodec, StochasticRoundingIsUnbiasedAndSeeded) {
  const BlockScaledCodec codec(FloatFormat::preset("e2m1"), RoundingMode::Stochastic, 32);
  const int64_t n = 32 * 400;
  std::vector<float> x(static_cast<size_t>(n), 0.3f);
  for (int64_t b = 0; b < n; b += 32) x[static_cast<size_t>(b)] = 1.0f;  // amax 1 in every block
  std::vector<uint8_t> a(codec.encodedBytes(n)), b(codec.encodedBytes(n));
  codec.encode(x.data(), n, a.data(), {.seed = 1, .stream = 2, .offset = 0});
  codec.encode(x.data(), n, b.data(), {.seed = 1, .stream = 2, .offset = 0});
  EXPECT_EQ(a, b);
  std::vector<float> y(static_cast<size_t>(n));
  codec.decode(a.data(), n, y.data());
  double mean = 0;
  for (int64_t i = 0; i < n; ++i)
    if (i % 32 != 0) mean += y[static_cast<size_t>(i)];
  mean /= static_cast<double>(n - n / 32);
  EXPECT_NEAR(mean, 0.3, 0.01);  // 0.3 lies between E2M1 values 0.25 and 0.375 (scale 2^-2)
}

TEST(BlockScaledCodec, FusedHopsEqualDecodeAddEncode) {
  const BlockScaledCodec codec(FloatFormat::preset("e2m1"), RoundingMode::NearestEven, 32);
  const auto x = mixedBlocks(100, 1), z = mixedBlocks(100, 2);
  std::vector<uint8_t> a(codec.encodedBytes(100)), b(a.size()), fused(a.size()), manual(a.size());
  codec.encode(x.data(), 100, a.data());
  codec.encode(z.data(), 100, b.data());
  codec.decodeAddEncode(a.data(), b.data(), 100, fused.data());
  std::vector<float> sum(100);
  codec.decode(a.data(), 100, sum.data());
  codec.decodeAdd(b.data(), 100, sum.data());
  codec.encode(sum.data(), 100, manual.data());
  EXPECT_EQ(fused, manual);
  codec.decodeAddEncode(a.data(), b.data(), 100, a.data());  // out may alias an input
  EXPECT_EQ(a, manual);
  EXPECT_ERROR_NAMES(BlockScaledCodec(FloatFormat::preset("fp32"), RoundingMode::NearestEven, 32), "fp32");
}

}  // namespace
}  // namespace aps::precision
