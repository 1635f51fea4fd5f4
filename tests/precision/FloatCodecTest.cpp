#include "precision/FloatCodec.h"

#include "framework/core/Error.h"
#include "framework/core/Rng.h"
#include "precision/CodecSpec.h"

#include "tests/common/ErrorMessage.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace aps::precision {
namespace {

std::vector<float> randomValues(int64_t n, float scale, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = rng.normal(0.0f, scale);
  return v;
}

TEST(FloatCodec, ByteCountsByWidth) {
  EXPECT_EQ(makeCodec("e4m3")->encodedBytes(1000), 1000u);
  EXPECT_EQ(makeCodec("e5m2")->encodedBytes(7), 7u);
  EXPECT_EQ(makeCodec("e2m1")->encodedBytes(1001), 501u);
  EXPECT_EQ(makeCodec("e3m0")->encodedBytes(4), 2u);
  EXPECT_EQ(makeCodec("fp16")->encodedBytes(10), 20u);
  EXPECT_EQ(makeCodec("bf16")->encodedBytes(10), 20u);
  EXPECT_EQ(makeCodec("fp32")->encodedBytes(10), 40u);
  const FloatCodec sixBit(FloatFormat::fromMap({{"exponent_bits", "3"}, {"mantissa_bits", "2"}}),
                          RoundingMode::NearestEven);
  EXPECT_EQ(sixBit.encodedBytes(5), 5u);
  const FloatCodec twelveBit(FloatFormat::fromMap({{"exponent_bits", "5"}, {"mantissa_bits", "6"}}),
                             RoundingMode::NearestEven);
  EXPECT_EQ(twelveBit.encodedBytes(5), 10u);
}

TEST(FloatCodec, FourBitValuesArePackedTwoPerByteLowNibbleFirst) {
  const auto codec = makeCodec("e2m1");
  const std::vector<float> in = {1.0f, 2.0f, -6.0f, 0.5f, 3.0f};
  std::vector<uint8_t> bytes(codec->encodedBytes(5));
  codec->encode(in.data(), 5, bytes.data());
  // E2M1 (bias 1): 1.0 = 0.01.0, 2.0 = 0.10.0, -6 = 1.11.1, 0.5 = 0.00.1, 3 = 0.10.1.
  ASSERT_EQ(bytes.size(), 3u);
  EXPECT_EQ(bytes[0], 0x42);
  EXPECT_EQ(bytes[1], 0x1f);
  EXPECT_EQ(bytes[2], 0x05);
  std::vector<float> out(5);
  codec->decode(bytes.data(), 5, out.data());
  EXPECT_EQ(out, in);
}

TEST(FloatCodec, RoundTripEqualsQuantizeForEveryWidth) {
  for (const char* name :
       {"e4m3", "e5m2", "e4m3_ieee", "e3m0", "e2m1", "fp16", "bf16", "fp32", "e4m3:stochastic", "fp16:toward_zero"}) {
    const auto spec = CodecSpec::parse(name);
    const auto codec = makeCodec(spec);
    const Quantizer q(spec.format);
    const int64_t n = 3001;
    const auto in = randomValues(n, 2.0f, 5);
    std::vector<uint8_t> bytes(codec->encodedBytes(n));
    const EncodeContext ctx{9, 1, 100};
    codec->encode(in.data(), n, bytes.data(), ctx);
    std::vector<float> out(n), expect(n);
    codec->decode(bytes.data(), n, out.data());
    q.quantize(in.data(), expect.data(), n, spec.rounding, ctx);
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(expect[i])) {
        EXPECT_TRUE(std::isnan(out[i])) << name;
      } else {
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(expect[i])) << name << " at " << i;
      }
    }
    std::vector<float> acc(n, 1.0f);
    codec->decodeAdd(bytes.data(), n, acc.data());
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isnan(expect[i])) {
        ASSERT_EQ(acc[i], 1.0f + expect[i]) << name;
      }
    }
  }
}

// fp32's encode is a copy that canonicalises NaNs: the rounding kernel's exact bits for every
// class of input (a strided sweep of all bit patterns plus NaN payloads, infinities,
// subnormals), in every rounding mode; a saturating fp32 keeps the kernel (inf -> max).
TEST(FloatCodec, Fp32EncodeIsTheRoundingKernelBitForBit) {
  std::vector<uint32_t> patterns;
  for (uint64_t u = 0; u <= 0xffffffffu; u += 65521) patterns.push_back(static_cast<uint32_t>(u));
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
                     0xff800000u, 0x7f800001u, 0xffc00000u, 0x7fc00000u, 0x7fffffffu, 0xffbfffffu}) {
    patterns.push_back(u);
  }
  std::vector<float> in(patterns.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = std::bit_cast<float>(patterns[i]);
  const auto n = static_cast<int64_t>(in.size());
  std::vector<CodecSpec> specs;
  for (const char* name : {"fp32", "fp32:stochastic", "fp32:toward_zero"}) specs.push_back(CodecSpec::parse(name));
  specs.push_back(CodecSpec::parse("fp32"));
  specs.back().format = FloatFormat::fromMap({{"preset", "fp32"}, {"overflow", "saturate"}});
  for (const CodecSpec& spec : specs) {
    const std::string name =
        makeCodec(spec)->name() + (spec.format.overflow == Overflow::Saturate ? " saturating" : "");
    const Quantizer q(spec.format);
    const EncodeContext ctx{3, 7, 11};
    std::vector<uint8_t> bytes(makeCodec(spec)->encodedBytes(n));
    makeCodec(spec)->encode(in.data(), n, bytes.data(), ctx);
    std::vector<float> expect(in.size());
    q.quantize(in.data(), expect.data(), n, spec.rounding, ctx);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t got = 0;
      std::memcpy(&got, bytes.data() + 4 * i, 4);
      ASSERT_EQ(got, std::bit_cast<uint32_t>(expect[static_cast<size_t>(i)]))
          << name << " input 0x" << std::hex << patterns[static_cast<size_t>(i)];
    }
  }
}

TEST(FloatCodec, DecodeAddEncodeIsOneHopAndMayAlias) {
  for (const char* name : {"e4m3", "e2m1", "fp16", "e5m2:stochastic"}) {
    const auto codec = makeCodec(name);
    const int64_t n = 2500;
    const auto x = randomValues(n, 1.0f, 1), y = randomValues(n, 1.0f, 2);
    std::vector<uint8_t> a(codec->encodedBytes(n)), b(a.size()), fused(a.size()), twoStep(a.size());
    codec->encode(x.data(), n, a.data());
    codec->encode(y.data(), n, b.data());
    const EncodeContext ctx{3, 4, 5};
    codec->decodeAddEncode(a.data(), b.data(), n, fused.data(), ctx);
    std::vector<float> sum(n);
    codec->decode(a.data(), n, sum.data());
    codec->decodeAdd(b.data(), n, sum.data());
    codec->encode(sum.data(), n, twoStep.data(), ctx);
    EXPECT_EQ(fused, twoStep) << name;
    codec->decodeAddEncode(a.data(), b.data(), n, a.data(), ctx);  // out aliases a
    EXPECT_EQ(a, twoStep) << name;
  }
}

TEST(CodecSpec, ParsesNamesAndYaml) {
  EXPECT_EQ(makeCodec("e4m3")->name(), "e4m3");
  EXPECT_EQ(makeCodec("e4m3:stochastic")->name(), "e4m3:stochastic");
  EXPECT_EQ(makeCodec("dettmers_dynamic/block256")->name(), "dettmers_dynamic/block256");
  EXPECT_EQ(makeCodec("dettmers_linear")->name(), "dettmers_linear");
  const auto spec = CodecSpec::fromYaml(YAML::Load("{format: {preset: e4m3, overflow: saturate}, rounding: sr}"));
  EXPECT_EQ(spec.format.overflow, Overflow::Saturate);
  EXPECT_EQ(spec.rounding, RoundingMode::Stochastic);
  EXPECT_EQ(CodecSpec::fromYaml(YAML::Load("{type: dettmers_dynamic, block_size: 512}")).blockSize, 512);
  // Dettmers' static tree, by name, alias, blocks and the YAML type map.
  EXPECT_EQ(makeCodec("dettmers_static")->name(), "dettmers_static");
  EXPECT_EQ(makeCodec("static_tree/block64")->name(), "dettmers_static/block64");
  EXPECT_EQ(CodecSpec::parse("dettmers_static/block256").kind, CodecSpec::Kind::DettmersStatic);
  const auto staticSpec = CodecSpec::fromYaml(YAML::Load("{type: dettmers_static, block_size: 128}"));
  EXPECT_EQ(staticSpec.kind, CodecSpec::Kind::DettmersStatic);
  EXPECT_EQ(makeCodec(staticSpec)->name(), "dettmers_static/block128");
  EXPECT_THROW(makeCodec("dettmers_static/block0"), aps::Error);
  const auto names = CodecSpec::names();
  EXPECT_NE(std::find(names.begin(), names.end(), "dettmers_static"), names.end());
  EXPECT_ERROR_NAMES(makeCodec("e4m3:sideways"), "sideways");
  EXPECT_THROW(makeCodec("dettmers_dynamic/block0"), aps::Error);
  // A float format with /block<N> is block-scaled (BlockScaledCodecTest); other suffixes are refused.
  EXPECT_EQ(makeCodec("e4m3/block8")->name(), "e4m3/block8");
  EXPECT_ERROR_NAMES(makeCodec("e4m3/chunk8"), "chunk8");
  EXPECT_ERROR_NAMES(CodecSpec::fromYaml(YAML::Load("{type: float, blok: 3}")), "blok");
  // A bare format map, as precision.format takes it in a config.
  const auto bare = CodecSpec::fromYaml(YAML::Load("{exponent_bits: 3, mantissa_bits: 2}"));
  EXPECT_EQ(bare.kind, CodecSpec::Kind::Float);
  EXPECT_EQ(bare.format.exponentBits, 3);
  EXPECT_EQ(bare.format.mantissaBits, 2);
  EXPECT_ERROR_NAMES(CodecSpec::fromYaml(YAML::Load("{exponent_bits: 9, mantissa_bits: 2}")), "exponent_bits");
}

}  // namespace
}  // namespace aps::precision
