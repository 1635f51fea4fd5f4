#include "precision/Quantizer.h"

#include "framework/core/Parallel.h"
#include "framework/core/Rng.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

namespace aps::precision {
namespace {

uint32_t bitsOf(float x) { return std::bit_cast<uint32_t>(x); }

std::vector<FloatFormat> smallFormats() {
  std::vector<FloatFormat> formats;
  for (const char* name : {"e5m2", "e4m3", "e4m3_ieee", "e3m0", "e2m1"}) formats.push_back(FloatFormat::preset(name));
  formats.push_back(FloatFormat::fromMap({{"preset", "e4m3"}, {"overflow", "saturate"}}));
  formats.push_back(FloatFormat::fromMap({{"preset", "e5m2"}, {"subnormals", "false"}}));
  formats.push_back(FloatFormat::fromMap({{"exponent_bits", "3"}, {"mantissa_bits", "4"}, {"bias", "2"}}));
  formats.push_back(FloatFormat::fromMap(
      {{"exponent_bits", "2"}, {"mantissa_bits", "2"}, {"specials", "none"}, {"overflow", "saturate"}}));
  return formats;
}

TEST(Quantizer, EveryCodeOfEverySmallFormatRoundTrips) {
  for (const auto& f : smallFormats()) {
    const Quantizer q(f);
    const uint32_t codes = 1u << f.bits();
    for (uint32_t c = 0; c < codes; ++c) {
      const float v = f.decode(c);
      const uint32_t field = (c & (f.signBit() - 1)) >> f.mantissaBits;
      if (!f.subnormals && field == 0 && (c & ((1u << f.mantissaBits) - 1)) != 0) continue;  // never produced
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(q.quantize(v))) << f.describe();
        EXPECT_EQ(q.encode(v) & (f.signBit() - 1), f.nanCode()) << f.describe();
        continue;
      }
      EXPECT_EQ(q.encode(v), c) << f.describe() << " code " << c << " value " << v;
      EXPECT_EQ(bitsOf(q.quantize(v)), bitsOf(v)) << f.describe() << " code " << c;
      for (auto mode : {RoundingMode::TowardZero, RoundingMode::Stochastic}) {
        EXPECT_EQ(q.encode(v, mode, 0xffffffffu), c) << f.describe() << " code " << c;
      }
    }
  }
}

// Finite non-negative values of a format in increasing order, with their codes.
std::vector<std::pair<float, uint32_t>> ladder(const FloatFormat& f) {
  std::vector<std::pair<float, uint32_t>> values;
  for (uint32_t c = 0; c <= f.maxFiniteCode(); ++c) {
    const uint32_t field = c >> f.mantissaBits;
    if (!f.subnormals && field == 0 && c != 0) continue;
    values.emplace_back(f.decode(c), c);
  }
  return values;
}

TEST(Quantizer, VectorKernelsAgreeWithTheScalarCore) {
  // The buffer kernels (AVX2 where available) against the scalar form, on random bit
  // patterns (every exponent, NaN, inf, subnormals), for every preset and mode.
  std::vector<FloatFormat> formats = smallFormats();
  for (const char* name : {"fp16", "bf16", "fp32"}) formats.push_back(FloatFormat::preset(name));
  formats.push_back(FloatFormat::fromMap({{"preset", "bf16"}, {"subnormals", "false"}, {"overflow", "saturate"}}));
  Rng rng(99);
  const int64_t n = 4099;
  std::vector<float> xs(n);
  for (auto& x : xs) x = std::bit_cast<float>(rng.nextU32());
  for (int64_t i = 0; i < 64; ++i) xs[i] = std::ldexp(rng.uniform(), -static_cast<int>(rng.below(40)));
  const EncodeContext ctx{5, 6, 7};
  for (const auto& f : formats) {
    const Quantizer q(f);
    for (auto mode : {RoundingMode::NearestEven, RoundingMode::Stochastic, RoundingMode::TowardZero}) {
      std::vector<float> values(n);
      std::vector<uint8_t> codes8(n);
      std::vector<uint16_t> codes16(n);
      q.quantize(xs.data(), values.data(), n, mode, ctx);
      if (f.bits() <= 8) q.encode(xs.data(), codes8.data(), n, mode, ctx);
      if (f.bits() <= 16) q.encode(xs.data(), codes16.data(), n, mode, ctx);
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = randomBits32(ctx.seed, ctx.stream, static_cast<uint64_t>(ctx.offset + i));
        const float v = q.quantize(xs[i], mode, bits);
        const uint32_t c = q.encode(xs[i], mode, bits);
        ASSERT_EQ(bitsOf(values[i]), bitsOf(v)) << f.describe() << " " << roundingModeName(mode) << " x=" << xs[i];
        const uint32_t c8 = f.bits() <= 8 ? codes8[i] : c;
        const uint32_t c16 = f.bits() <= 16 ? codes16[i] : c;
        ASSERT_EQ(c8, c) << f.describe() << " x=" << xs[i];
        ASSERT_EQ(c16, c) << f.describe() << " x=" << xs[i];
        const float decoded = f.bits() <= 16 ? f.decode(c) : v;
        ASSERT_TRUE(std::isnan(v) || bitsOf(decoded) == bitsOf(v)) << f.describe() << " x=" << xs[i];
      }
    }
  }
}

TEST(Quantizer, MidpointsRoundToEvenAndNeighboursToNearest) {
  for (const auto& f : smallFormats()) {
    const Quantizer q(f);
    const auto values = ladder(f);
    for (size_t k = 0; k + 1 < values.size(); ++k) {
      const auto [lo, loCode] = values[k];
      const auto [hi, hiCode] = values[k + 1];
      const float mid = 0.5f * (lo + hi);  // exact: at most 8 significant bits
      const uint32_t even = (loCode & 1u) == 0 ? loCode : hiCode;
      for (float sign : {1.0f, -1.0f}) {
        const uint32_t s = sign < 0 ? f.signBit() : 0u;
        EXPECT_EQ(q.encode(sign * mid), even | s) << f.describe() << " mid " << mid;
        EXPECT_EQ(q.encode(sign * std::nextafter(mid, 0.0f)), loCode | s) << f.describe() << " below " << mid;
        EXPECT_EQ(q.encode(sign * std::nextafter(mid, 1e30f)), hiCode | s) << f.describe() << " above " << mid;
        EXPECT_EQ(q.encode(sign * std::nextafter(hi, 0.0f), RoundingMode::TowardZero), loCode | s) << f.describe();
      }
    }
  }
}

TEST(Quantizer, OverflowFollowsThePolicyAfterRounding) {
  const Quantizer e4m3(FloatFormat::preset("e4m3"));
  EXPECT_EQ(e4m3.quantize(464.0f), 448.0f);  // tie between 448 and 480 rounds to even 448
  EXPECT_TRUE(std::isnan(e4m3.quantize(464.5f)));
  EXPECT_TRUE(std::isnan(e4m3.quantize(std::numeric_limits<float>::infinity())));
  EXPECT_EQ(e4m3.encode(-1e6f), 0xffu);
  const Quantizer e4m3sat(FloatFormat::fromMap({{"preset", "e4m3"}, {"overflow", "saturate"}}));
  EXPECT_EQ(e4m3sat.quantize(1e6f), 448.0f);
  EXPECT_EQ(e4m3sat.quantize(-std::numeric_limits<float>::infinity()), -448.0f);
  EXPECT_TRUE(std::isnan(e4m3sat.quantize(std::numeric_limits<float>::quiet_NaN())));
  const Quantizer e5m2(FloatFormat::preset("e5m2"));
  EXPECT_EQ(e5m2.quantize(61439.0f), 57344.0f);
  EXPECT_EQ(e5m2.quantize(61440.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(e5m2.encode(-61440.0f), 0xfcu);
  const Quantizer e2m1(FloatFormat::preset("e2m1"));
  EXPECT_EQ(e2m1.quantize(100.0f), 6.0f);
  EXPECT_EQ(e2m1.quantize(std::numeric_limits<float>::quiet_NaN()), 6.0f);  // no NaN: max magnitude
  EXPECT_EQ(e2m1.quantize(0.25f), 0.0f);                                    // tie: to even 0
  EXPECT_EQ(e2m1.quantize(0.26f), 0.5f);
  const Quantizer e4m3ieee(FloatFormat::preset("e4m3_ieee"));
  EXPECT_EQ(e4m3ieee.quantize(247.0f), 240.0f);
  EXPECT_EQ(e4m3ieee.quantize(248.0f), std::numeric_limits<float>::infinity());
  // Without subnormals values below the smallest normal round to 0 or to it.
  const Quantizer noSub(FloatFormat::fromMap({{"preset", "e5m2"}, {"subnormals", "false"}}));
  EXPECT_EQ(noSub.quantize(std::ldexp(1.0f, -15)), 0.0f);
  EXPECT_EQ(noSub.quantize(std::ldexp(1.1f, -15)), std::ldexp(1.0f, -14));
}

#if defined(__F16C__)
// Reference: the F16C hardware conversion with round-to-nearest-even.
void hardwareFp16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (size_t i = n - n % 8; i < n; ++i) {  // _cvtss_sh without clang's C99 compound literal
    out[i] = static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(in[i]), _MM_FROUND_TO_NEAREST_INT), 0));
  }
}

void expectFp16Agrees(const Quantizer& q, const std::vector<float>& xs) {
  std::vector<uint16_t> ours(xs.size()), ref(xs.size());
  std::vector<float> values(xs.size());
  q.encode(xs.data(), ours.data(), static_cast<int64_t>(xs.size()), RoundingMode::NearestEven);
  q.quantize(xs.data(), values.data(), static_cast<int64_t>(xs.size()), RoundingMode::NearestEven);
  hardwareFp16(xs.data(), ref.data(), xs.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const bool refNan = (ref[i] & 0x7c00) == 0x7c00 && (ref[i] & 0x3ff) != 0;
    if (refNan) {
      mismatches += !(std::isnan(values[i]) && (ours[i] & 0x7fff) == 0x7e00);
      continue;
    }
    const float refValue = _cvtsh_ss(ref[i]);
    if (ours[i] != ref[i] || bitsOf(values[i]) != bitsOf(refValue)) {
      if (++mismatches < 10) ADD_FAILURE() << "x=" << xs[i] << " ours " << ours[i] << " f16c " << ref[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Quantizer, Fp16AgreesWithF16cOnMillionsOfRandomInputs) {
  const Quantizer q(FloatFormat::preset("fp16"));
  Rng rng(7);
  std::vector<float> xs(1 << 21);
  // Random bit patterns (every exponent), then values concentrated in fp16's range.
  for (auto& x : xs) x = std::bit_cast<float>(rng.nextU32());
  expectFp16Agrees(q, xs);
  for (auto& x : xs) x = std::ldexp(rng.uniform() * 2.0f - 1.0f, static_cast<int>(rng.below(48)) - 30);
  expectFp16Agrees(q, xs);
}

TEST(Quantizer, Fp16AgreesWithF16cOnEdgeCases) {
  const Quantizer q(FloatFormat::preset("fp16"));
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           0x1p-24f,
                           0x1p-25f,
                           0x1.000002p-25f,
                           0x1.8p-24f,
                           0x1p-26f,
                           0x1p-14f,
                           0x1.ffcp-15f,
                           0x1.ffdp-15f,
                           0x1.ffep-15f,
                           65504.0f,
                           65519.0f,
                           65520.0f,
                           65536.0f,
                           1e30f,
                           inf,
                           -inf,
                           std::numeric_limits<float>::quiet_NaN(),
                           -std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::denorm_min(),
                           -std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::min(),
                           1.0f,
                           1.0f + 0x1p-11f,
                           1.0f + 0x1p-10f + 0x1p-11f,
                           -2049.0f,
                           2049.0f,
                           2051.0f};
  for (uint32_t b = 0x33000000u; b < 0x33800000u; b += 0x1000u) xs.push_back(std::bit_cast<float>(b));
  expectFp16Agrees(q, xs);
}

#else
TEST(Quantizer, Fp16AgreesWithF16cOnMillionsOfRandomInputs) { GTEST_SKIP() << "built without F16C"; }
#endif

uint16_t referenceBf16(float x) {
  // The usual round-to-nearest-even bit trick (as in PyTorch's c10::BFloat16).
  uint32_t u = bitsOf(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0 | ((u >> 16) & 0x8000);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

TEST(Quantizer, Bf16AgreesWithTheBitTrick) {
  const Quantizer q(FloatFormat::preset("bf16"));
  Rng rng(11);
  std::vector<float> xs(1 << 20);
  for (auto& x : xs) x = std::bit_cast<float>(rng.nextU32());
  xs[0] = std::numeric_limits<float>::max();
  xs[1] = std::numeric_limits<float>::denorm_min();
  xs[2] = -0.0f;
  std::vector<uint16_t> codes(xs.size());
  std::vector<float> values(xs.size());
  q.encode(xs.data(), codes.data(), static_cast<int64_t>(xs.size()), RoundingMode::NearestEven);
  q.quantize(xs.data(), values.data(), static_cast<int64_t>(xs.size()), RoundingMode::NearestEven);
  int64_t mismatches = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const uint16_t ref = referenceBf16(xs[i]);
    if (std::isnan(xs[i])) {
      mismatches += !std::isnan(values[i]);
      continue;
    }
    mismatches += codes[i] != ref || bitsOf(values[i]) != (uint32_t{ref} << 16);
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Quantizer, RandomBitsBlockMatchesRandomBits32) {
  for (uint64_t first : {uint64_t{0}, uint64_t{12345}, uint64_t{0xfffffff0u}, ~uint64_t{0} - 20}) {
    std::vector<uint32_t> bits(37);
    randomBitsBlock(bits.data(), 37, 0x123456789abcdefull, 0xfedcba9876543210ull, first);
    for (uint64_t i = 0; i < 37; ++i) {
      ASSERT_EQ(bits[i], randomBits32(0x123456789abcdefull, 0xfedcba9876543210ull, first + i)) << first << "+" << i;
    }
  }
}

TEST(Quantizer, StochasticRoundingIsUnbiasedAndReproducible) {
  for (const char* name : {"e4m3", "e5m2", "e2m1", "bf16"}) {
    const Quantizer q(FloatFormat::preset(name));
    for (float x : {1.1f, -0.3f, 0.0123f, 3.3e-3f, 5.55f}) {
      if (std::fabs(x) > q.format().maxValue()) continue;
      const int64_t n = 200000;
      std::vector<float> in(n, x), out(n);
      q.quantize(in.data(), out.data(), n, RoundingMode::Stochastic, {42, 3, 0});
      double sum = 0.0;
      float lo = 1e30f, hi = -1e30f;
      for (float v : out) {
        sum += v;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      // Bernoulli between the two neighbours: sd of the mean <= (hi - lo) / (2 sqrt(n)).
      const double bound = 5.0 * (hi - lo) / (2.0 * std::sqrt(static_cast<double>(n))) + 1e-12;
      EXPECT_NEAR(sum / n, x, bound) << name << " x=" << x;
      EXPECT_EQ(std::fabs(lo < 0 ? hi : lo), std::fabs(q.quantize(x, RoundingMode::TowardZero))) << name;
      std::vector<float> again(n);
      q.quantize(in.data(), again.data(), n / 2, RoundingMode::Stochastic, {42, 3, 0});
      q.quantize(in.data() + n / 2, again.data() + n / 2, n - n / 2, RoundingMode::Stochastic, {42, 3, n / 2});
      EXPECT_EQ(again, out) << "stochastic bits must depend on the element index only";
    }
  }
}

TEST(Quantizer, ResultsDoNotDependOnFlushToZeroModes) {
  // Integer-only kernels: subnormal results stay exact under FTZ and DAZ.
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
  const Quantizer bf16(FloatFormat::preset("bf16"));
  std::vector<float> xs(64, std::bit_cast<float>(0x00012345u)), out(64);  // an fp32 subnormal
  bf16.quantize(xs.data(), out.data(), 64, RoundingMode::NearestEven);
  const float scalar = bf16.quantize(xs[0]);
  _mm_setcsr(saved);
  EXPECT_EQ(bitsOf(out[0]), 0x00010000u);
  EXPECT_EQ(bitsOf(out[63]), 0x00010000u);
  EXPECT_EQ(bitsOf(scalar), 0x00010000u);
}

TEST(Quantizer, RoundToFormatDoesNotDependOnTheThreadCount) {
  Rng rng(4);
  std::vector<float> data(300000);
  for (auto& v : data) v = rng.normal();
  auto one = data, four = data;
  const int saved = numThreads();
  setNumThreads(1);
  roundToFormat(one.data(), static_cast<int64_t>(one.size()), FloatFormat::preset("bf16"), RoundingMode::Stochastic,
                {8, 9, 10});
  setNumThreads(4);
  roundToFormat(four.data(), static_cast<int64_t>(four.size()), FloatFormat::preset("bf16"), RoundingMode::Stochastic,
                {8, 9, 10});
  setNumThreads(saved);
  EXPECT_EQ(one, four);
  EXPECT_NE(one, data);
}

TEST(Quantizer, RoundToFormatInPlace) {
  std::vector<float> data = {1.0f + 0x1p-9f, 3.14159265f, -1e-8f, 70000.0f};
  roundToFormat(data.data(), static_cast<int64_t>(data.size()), FloatFormat::preset("fp16"), RoundingMode::NearestEven);
  EXPECT_EQ(data[0], 1.0f + 0x1p-9f);
  EXPECT_EQ(data[1], 3.140625f);
  EXPECT_EQ(data[2], -0.0f);
  EXPECT_TRUE(std::signbit(data[2]));
  EXPECT_EQ(data[3], std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace aps::precision
