// The shared host-device arithmetic of precision/kernels/*.h against the definitions it
// replaced and against the CPU fast paths that must stay bit-identical to it (the CUDA codecs
// run these functions, so these tests are what proves the GPU's arithmetic on the CPU).
#include "framework/core/Rng.h"
#include "precision/DettmersCodec.h"
#include "precision/FloatCodec.h"
#include "precision/Quantizer.h"
#include "precision/kernels/Dettmers.h"
#include "framework/numerics/FloatRounding.h"
#include "precision/kernels/Scaling.h"

#include <gtest/gtest.h>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

namespace aps::precision {
namespace {

uint32_t bitsOf(float x) { return std::bit_cast<uint32_t>(x); }

std::vector<FloatFormat> formatsUpTo16Bits() {
  std::vector<FloatFormat> formats;
  for (const char* name : {"fp16", "bf16", "e5m2", "e4m3", "e4m3_ieee", "e3m0", "e3m2", "e2m3", "e2m1"}) {
    formats.push_back(FloatFormat::preset(name));
  }
  formats.push_back(FloatFormat::fromMap({{"preset", "e5m2"}, {"subnormals", "false"}}));
  formats.push_back(FloatFormat::fromMap({{"exponent_bits", "3"}, {"mantissa_bits", "4"}, {"bias", "2"}}));
  formats.push_back(FloatFormat::fromMap({{"exponent_bits", "6"}, {"mantissa_bits", "5"}, {"bias", "40"}}));
  return formats;
}

TEST(SharedKernels, DecodeCodeIsFloatFormatDecodeForEveryCode) {
  for (const auto& f : formatsUpTo16Bits()) {
    const kernels::CodeDecodeParams p = codeDecodeParams(f, false);
    for (uint32_t c = 0; c < (1u << f.bits()); ++c) {
      const float expected = f.decode(c);
      const float got = kernels::decodeCode(c, p);
      if (p.layout == kernels::CodeDecodeParams::Bf16) {
        // bf16 reads NaN codes with their payload (the top half of the fp32 bits).
        ASSERT_EQ(bitsOf(got), c << 16) << f.describe() << " code " << c;
        ASSERT_TRUE(std::isnan(expected) || bitsOf(got) == bitsOf(expected)) << f.describe() << " code " << c;
      } else {
        ASSERT_EQ(bitsOf(got), bitsOf(expected)) << f.describe() << " code " << c;
      }
    }
  }
}

#if defined(__F16C__)
TEST(SharedKernels, Fp16LayoutDecodesAsF16cForEveryCode) {
  const kernels::CodeDecodeParams p = codeDecodeParams(FloatFormat::preset("fp16"), true);
  ASSERT_EQ(p.layout, kernels::CodeDecodeParams::Fp16);
  for (uint32_t c = 0; c < 65536; ++c) {
    ASSERT_EQ(bitsOf(kernels::decodeCode(c, p)), bitsOf(_cvtsh_ss(static_cast<uint16_t>(c)))) << c;
  }
}
#endif

TEST(SharedKernels, FloatCodecDecodesEveryCodeAsTheSharedDecode) {
  for (const auto& f : formatsUpTo16Bits()) {
    const FloatCodec codec(f, RoundingMode::NearestEven);
    const int64_t n = int64_t{1} << f.bits();
    std::vector<uint8_t> wire(codec.encodedBytes(n));
    for (int64_t i = 0; i < n; ++i) {
      const auto c = static_cast<uint32_t>(i);
      if (codec.bytesPerValue() == 0) {
        wire[static_cast<size_t>(i / 2)] |= static_cast<uint8_t>(c << (4 * (i % 2)));
      } else if (codec.bytesPerValue() == 1) {
        wire[static_cast<size_t>(i)] = static_cast<uint8_t>(c);
      } else {
        wire[static_cast<size_t>(2 * i)] = static_cast<uint8_t>(c);
        wire[static_cast<size_t>(2 * i + 1)] = static_cast<uint8_t>(c >> 8);
      }
    }
    std::vector<float> out(static_cast<size_t>(n));
    codec.decode(wire.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bitsOf(out[static_cast<size_t>(i)]),
                bitsOf(kernels::decodeCode(static_cast<uint32_t>(i), codec.decodeParams())))
          << f.describe() << " code " << i;
    }
  }
}

TEST(SharedKernels, VectorRoundingAgreesWithTheScalarCoreOnASweepOfAllFloats) {
  // Every 65537th fp32 bit pattern (all exponents, both signs, NaN, inf, subnormals), the
  // buffer kernels (AVX2 where built) against kernels::roundOne, in every mode.
  std::vector<float> xs;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65537)
    xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  const auto n = static_cast<int64_t>(xs.size());
  const EncodeContext ctx{11, 12, 13};
  std::vector<FloatFormat> formats = formatsUpTo16Bits();
  formats.push_back(FloatFormat::preset("fp32"));
  for (const auto& f : formats) {
    const Quantizer q(f);
    for (auto mode : {RoundingMode::NearestEven, RoundingMode::Stochastic, RoundingMode::TowardZero}) {
      std::vector<float> values(xs.size());
      std::vector<uint16_t> codes(xs.size());
      q.quantize(xs.data(), values.data(), n, mode, ctx);
      if (f.bits() <= 16) q.encode(xs.data(), codes.data(), n, mode, ctx);
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = randomBits32(ctx.seed, ctx.stream, static_cast<uint64_t>(ctx.offset + i));
        const auto k = static_cast<size_t>(i);
        ASSERT_EQ(bitsOf(values[k]), bitsOf(kernels::roundValue(xs[k], mode, bits, q.params())))
            << f.describe() << " " << roundingModeName(mode) << " x bits " << bitsOf(xs[k]);
        if (f.bits() <= 16) {
          ASSERT_EQ(codes[k], kernels::roundCode(xs[k], mode, bits, q.params())) << f.describe() << " " << xs[k];
        }
      }
    }
  }
}

TEST(SharedKernels, DettmersBucketShortcutMatchesTheSharedSearch) {
  for (auto type : {DettmersCodec::Type::DynamicTree, DettmersCodec::Type::Linear, DettmersCodec::Type::StaticTree}) {
    const DettmersCodec codec(type, 0);
    std::vector<float> vs;
    Rng rng(3);
    for (uint32_t top = 0; top < 65536; ++top) {
      for (uint32_t low : {0u, 0xffffu, 0x8000u, rng.nextU32() & 0xffffu})
        vs.push_back(std::bit_cast<float>(top << 16 | low));
    }
    for (int k = 0; k < 255; ++k) {
      const float m = codec.midpoints()[static_cast<size_t>(k)];
      vs.push_back(m);
      vs.push_back(std::nextafter(m, 2.0f));
      vs.push_back(std::nextafter(m, -2.0f));
    }
    for (float v : vs) ASSERT_EQ(codec.nearestCode(v), codec.nearestCodeBySearch(v)) << "v bits " << bitsOf(v);
  }
}

TEST(SharedKernels, DettmersBlocksWhoseReciprocalOverflowsKeepTheirSigns) {
  // absmax 1e-40 (an fp32 subnormal): 1 / absmax is inf, so the scaled values are +-inf,
  // which go to the top and bottom codes (the bucket shortcut once sent +inf to code 1).
  const std::vector<float> x = {1e-40f, 5e-41f, -1e-40f, 0.0f};
  for (auto type : {DettmersCodec::Type::DynamicTree, DettmersCodec::Type::Linear, DettmersCodec::Type::StaticTree}) {
    const DettmersCodec codec(type, 0);
    std::vector<uint8_t> wire(codec.encodedBytes(4));
    std::vector<float> out(4);
    codec.encode(x.data(), 4, wire.data());
    codec.decode(wire.data(), 4, out.data());
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(std::signbit(out[i]), std::signbit(x[i])) << i;
      EXPECT_LE(std::fabs(out[i]), 1e-40f) << i;
    }
  }
}

TEST(SharedKernels, PowerOfTwoIsLdexp) {
  for (int s = -1300; s <= 1300; ++s) {
    ASSERT_EQ(std::bit_cast<uint64_t>(kernels::pow2Double(s)),
              std::bit_cast<uint64_t>(std::ldexp(1.0, std::clamp(s, -1100, 1100))))
        << s;
  }
}

// The definitions the shared scale functions replaced (frexp in double).
uint32_t referenceScaleCode(float amax, int emax) {
  if (!(amax <= std::numeric_limits<float>::max())) return 255;
  if (amax == 0.0f) return 127;
  int k = 0;
  std::frexp(amax, &k);
  return static_cast<uint32_t>(std::clamp(k - 1 - emax, -127, 127) + 127);
}

float referenceApsExponent(float m, int worldSize) {
  if (!(m <= std::numeric_limits<float>::max())) return std::numeric_limits<float>::infinity();
  if (m == 0.0f) return -1.0e9f;
  int k = 0;
  const double f = std::frexp(static_cast<double>(worldSize) * m, &k);
  return static_cast<float>(f == 0.5 ? k - 1 : k);
}

TEST(SharedKernels, ScaleExponentsMatchTheFrexpDefinitions) {
  Rng rng(17);
  std::vector<uint32_t> bits = {0u,        1u,          2u,          3u,          0x7fffffu,
                                0x800000u, 0x7f7fffffu, 0x7f800000u, 0x7fc00000u, 0x3f800000u};
  for (int i = 0; i < 200000; ++i) bits.push_back(rng.nextU32() & 0x7fffffffu);
  for (int e = 1; e < 255; ++e) bits.push_back(static_cast<uint32_t>(e) << 23);  // powers of two
  for (uint32_t b : bits) {
    const float m = std::bit_cast<float>(b);
    for (int emax : {0, 2, 8, 15, 127}) {
      ASSERT_EQ(kernels::blockScaleCode(b, emax), referenceScaleCode(m, emax)) << b << " " << emax;
    }
    for (int n : {1, 2, 3, 7, 8, 64, 1000, 1 << 28}) {
      ASSERT_EQ(bitsOf(kernels::apsExponent(b, n)), bitsOf(referenceApsExponent(m, n))) << b << " " << n;
    }
  }
}

TEST(SharedKernels, BlockScaledValuesScaleInDouble) {
  Rng rng(23);
  for (int i = 0; i < 100000; ++i) {
    const float x = std::bit_cast<float>(rng.nextU32());
    if (std::isnan(x)) continue;
    const auto code = static_cast<uint32_t>(rng.below(255));
    const int shift = 127 - static_cast<int>(code);
    const float expected = shift == 0 ? x : static_cast<float>(static_cast<double>(x) * std::ldexp(1.0, shift));
    ASSERT_EQ(bitsOf(kernels::blockScaledInput(x, code)), bitsOf(expected)) << x << " " << code;
  }
  EXPECT_TRUE(std::isnan(kernels::blockScaledOutput(1.0f, kernels::kNanScale)));
  EXPECT_EQ(kernels::blockScaledInput(5.0f, kernels::kNanScale), 0.0f);
}

#if defined(__x86_64__)
// The device computes its codecs' sums and scalings through aps::addAsX86 / mulAsX86 /
// nanAsX86 (framework/core/HostDevice.h) so that a NaN on the wire has the CPU's bits. Here
// they run on the host against this CPU's own instructions: every pair of specials and
// ordinary values, both-NaN pairs aside (there the compiler's operand order decides).
TEST(SharedKernels, NanResultsAreTheCpusOwn) {
  const float inf = std::numeric_limits<float>::infinity();
  const float values[] = {0.0f,
                          -0.0f,
                          1.5f,
                          -3.0f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          inf,
                          -inf,
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          std::bit_cast<float>(0x7fc12345u),
                          std::bit_cast<float>(0xffd00001u),
                          std::bit_cast<float>(0x7f800001u),  // signalling
                          std::bit_cast<float>(0xff812345u)};
  int nanResults = 0;
  for (float a : values) {
    for (float b : values) {
      if (std::isnan(a) && std::isnan(b)) continue;
      volatile float va = a, vb = b;  // the CPU's instruction, not the compiler's constant folding
      const float sum = va + vb, product = va * vb;
      ASSERT_EQ(bitsOf(aps::addAsX86(a, b)), bitsOf(sum)) << a << " + " << b;
      ASSERT_EQ(bitsOf(aps::mulAsX86(a, b)), bitsOf(product)) << a << " * " << b;
      nanResults += std::isnan(sum) + std::isnan(product);
    }
    if (std::isnan(a)) {
      volatile double scale = 0.25;
      const float scaled = static_cast<float>(static_cast<double>(a) * scale);
      ASSERT_EQ(bitsOf(kernels::scaleByPow2(a, -2)), bitsOf(scaled)) << bitsOf(a);
      ASSERT_EQ(bitsOf(kernels::dettmersDecode(0.5f, a)), bitsOf(a) | 0x00400000u) << bitsOf(a);
    }
  }
  EXPECT_GT(nanResults, 100);  // the NaN cases were reached: inf - inf, 0 * inf, one NaN operand
  // The float codecs' decode-add (addDecoded): the CPU's sum, but a NaN value is kept (made
  // quiet) whatever the sum holds, a NaN sum among them.
  for (float sum : values) {
    for (float v : values) {
      volatile float vs = sum, vv = v;
      const uint32_t want = std::isnan(v) ? bitsOf(v) | 0x00400000u : bitsOf(vs + vv);
      ASSERT_EQ(bitsOf(aps::addDecoded(sum, v)), want) << bitsOf(sum) << " + " << bitsOf(v);
    }
  }
}
#endif

}  // namespace
}  // namespace aps::precision
