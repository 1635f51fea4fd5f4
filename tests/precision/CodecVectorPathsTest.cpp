// FloatCodec's vector encode and decode paths (AVX-512 or AVX2 where built) against the scalar
// core they must reproduce byte for byte: kernels::roundCode for encoding, kernels::decodeCode
// for decoding. The expected wire is built here from the scalar functions, never from the
// codec, so a vector path that drifts fails.
#include "tests/precision/CodecVectorPathsTesting.h"

#include "framework/core/Rng.h"
#include "precision/ApsScaler.h"
#include "precision/BlockScaledCodec.h"
#include "precision/DettmersCodec.h"
#include "precision/StreamPrefetch.h"
#include "precision/kernels/Scaling.h"

#include <gtest/gtest.h>

#include <immintrin.h>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

namespace aps::precision::testing {
namespace {

// Inputs a codec's rounding is most likely to get wrong: every value of the format, the
// midpoints between neighbours and the floats either side of them, with both signs; fp32
// subnormals, zeros, infinities and NaNs with several payloads.
std::vector<float> edgeInputs(const FloatFormat& f) {
  std::vector<float> xs;
  std::vector<float> values;
  for (uint32_t c = 0; c < (1u << (f.bits() - 1)); ++c) {
    const float v = f.decode(c);
    if (std::isfinite(v)) values.push_back(v);
  }
  values.push_back(std::ldexp(f.maxValue(), 1));
  for (size_t k = 0; k < values.size(); ++k) {
    const float mid =
        k + 1 < values.size() ? static_cast<float>((double{values[k]} + double{values[k + 1]}) / 2) : values[k];
    for (float x : {values[k], mid}) {
      for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, std::numeric_limits<float>::infinity())}) {
        xs.push_back(y);
        xs.push_back(-y);
      }
    }
  }
  for (uint32_t bits : {0x00000001u, 0x00000002u, 0x00400000u, 0x007fffffu, 0x00800000u, 0x7f7fffffu, 0x7f800000u,
                        0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0x7fa00000u}) {
    xs.push_back(std::bit_cast<float>(bits));
    xs.push_back(std::bit_cast<float>(bits | 0x80000000u));
  }
  return xs;
}

TEST(CodecVectorPaths, EncodeAgreesWithTheScalarCoreOnAStridedSweepAndTheEdges) {
  // Every 4099th fp32 bit pattern (every exponent, NaN, inf, subnormals) plus the edges; the
  // length leaves a tail for the scalar path, and the counters straddle 2^32.
  std::vector<float> sweep;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099)
    sweep.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  const EncodeContext ctx{21, 22, (int64_t{1} << 32) - 500000};
  for (const auto& f : vectorPathFormats()) {
    std::vector<float> xs = sweep;
    const std::vector<float> edges = edgeInputs(f);
    xs.insert(xs.end(), edges.begin(), edges.end());
    for (auto mode : {RoundingMode::NearestEven, RoundingMode::Stochastic, RoundingMode::TowardZero}) {
      const FloatCodec codec(f, mode);
      const int64_t bad = firstEncodeMismatch(codec, xs.data(), static_cast<int64_t>(xs.size()), ctx);
      ASSERT_LT(bad, 0) << codec.name() << " " << f.describe() << ": x bits " << std::hex
                        << std::bit_cast<uint32_t>(xs[static_cast<size_t>(bad)]);
    }
  }
}

TEST(CodecVectorPaths, EncodeDoesNotDependOnFlushToZeroModes) {
  // The nearest-rounding route counts quanta below 2^emin with a float multiply: under DAZ an
  // fp32 subnormal input reads as zero, which must not change a code. The last two formats put
  // the quantum 2^q at q = -125 (the lowest that route takes: fp32's subnormals stay below half
  // a quantum) and q = -126 (the integer route).
  std::vector<FloatFormat> formats = vectorPathFormats();
  formats.push_back(FloatFormat::fromMap({{"exponent_bits", "7"}, {"mantissa_bits", "4"}, {"bias", "122"}}));
  formats.push_back(FloatFormat::fromMap({{"exponent_bits", "7"}, {"mantissa_bits", "4"}, {"bias", "123"}}));
  std::vector<float> sweep;  // every exponent field, fp32 subnormals among them
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65537)
    sweep.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  const unsigned saved = _mm_getcsr();
  for (const auto& f : formats) {
    std::vector<float> xs = sweep;
    const std::vector<float> edges = edgeInputs(f);
    xs.insert(xs.end(), edges.begin(), edges.end());
    for (const float t : {f.minSubnormal(), std::ldexp(f.minSubnormal(), -1)}) {  // the smallest code and its midpoint
      for (const float y : {t, std::nextafter(t, 0.0f), std::nextafter(t, 1.0f)}) xs.push_back(y);
    }
    for (auto mode : {RoundingMode::NearestEven, RoundingMode::TowardZero}) {
      const FloatCodec codec(f, mode);
      _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
      const int64_t bad = firstEncodeMismatch(codec, xs.data(), static_cast<int64_t>(xs.size()), {});
      _mm_setcsr(saved);
      ASSERT_LT(bad, 0) << codec.name() << " " << f.describe() << " under FTZ and DAZ: x bits " << std::hex
                        << std::bit_cast<uint32_t>(xs[static_cast<size_t>(bad)]);
    }
  }
}

TEST(CodecVectorPaths, EncodeAgreesAtEveryLengthAndStart) {
  // Lengths around the vector widths (16, 64 values) and odd nibble counts.
  Rng rng(7);
  std::vector<float> xs(300);
  for (auto& x : xs) x = rng.normal(0.0f, 4.0f);
  for (const auto& f : vectorPathFormats()) {
    for (auto mode : {RoundingMode::NearestEven, RoundingMode::Stochastic}) {
      const FloatCodec codec(f, mode);
      for (int64_t n : {1, 15, 16, 17, 63, 64, 65, 127, 129, 255, 300}) {
        for (int64_t start : {0, 1}) {
          // Buffer offsets of every residue mod 4 (where an element falls in its Philox block),
          // also where the block counter's low word wraps (offset 2^34).
          for (int64_t offset : {int64_t{0xffffffe0}, int64_t{0xffffffe1}, int64_t{0xffffffe2}, int64_t{0xffffffe3},
                                 (int64_t{1} << 34) - 130, (int64_t{1} << 34) - 129}) {
            const int64_t bad = firstEncodeMismatch(codec, xs.data() + start, n - start, {3, 4, offset});
            ASSERT_LT(bad, 0) << codec.name() << " n " << n << " start " << start << " offset " << offset << " at "
                              << bad;
          }
        }
      }
    }
  }
}

// fp16 and bf16 outputs of nonTemporalBytes or more are written by non-temporal stores from the
// first 64-byte aligned code on: the same bytes at every alignment of the output, nothing
// written outside it.
TEST(CodecVectorPaths, HalfEncodesStreamTheSameBytesAtEveryAlignment) {
  struct Threshold {
    Threshold() { setNonTemporalBytes(256); }
    ~Threshold() { setNonTemporalBytes(0); }
  } lowered;
  Rng rng(17);
  std::vector<float> xs(3001);
  for (auto& x : xs) x = rng.normal(0.0f, 1e4f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::max(), 1e-40f, -0.0f};
  for (size_t k = 0; k < std::size(specials); ++k) xs[37 * k + 5] = specials[k];
  for (const char* name : {"fp16", "bf16"}) {
    const FloatCodec codec(FloatFormat::preset(name), RoundingMode::NearestEven);
    for (int64_t n : {int64_t{64}, int64_t{200}, int64_t{3001}}) {
      const std::vector<uint8_t> expected = scalarWire(codec, xs.data(), n, {});
      for (size_t offset : {size_t{0}, size_t{1}, size_t{2}, size_t{6}, size_t{30}, size_t{62}}) {
        std::vector<uint8_t> buffer(expected.size() + 192, 0xa5);
        // From a 64-byte boundary inside the buffer, plus offset.
        const size_t base = (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64 + offset;
        codec.encode(xs.data(), n, buffer.data() + base, {});
        const auto written = buffer.begin() + static_cast<std::ptrdiff_t>(base);
        ASSERT_TRUE(std::equal(expected.begin(), expected.end(), written))
            << name << " n " << n << " offset " << offset;
        ASSERT_TRUE(std::all_of(buffer.begin(), written, [](uint8_t b) { return b == 0xa5; })) << name;
        ASSERT_TRUE(std::all_of(written + static_cast<std::ptrdiff_t>(expected.size()), buffer.end(),
                                [](uint8_t b) { return b == 0xa5; }))
            << name << " n " << n << " offset " << offset;
      }
    }
  }
}

TEST(CodecVectorPaths, RoundTripIntoIsEncodeThenDecodeOrDecodeAdd) {
  // The strided sweep and the edges, stored and added onto values that include NaNs of both
  // signs, infinities and zeros (a sum of two NaNs must keep the NaN decodeAdd keeps); then
  // lengths around the vector widths (16 and 64 values) and odd starts.
  std::vector<float> sweep;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099)
    sweep.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  Rng rng(11);
  const EncodeContext ctx{41, 42, (int64_t{1} << 32) - 300000};
  for (const auto& f : vectorPathFormats()) {
    std::vector<float> xs = sweep;
    const std::vector<float> edges = edgeInputs(f);
    xs.insert(xs.end(), edges.begin(), edges.end());
    std::vector<float> acc(xs.size());
    for (size_t k = 0; k < acc.size(); ++k) {
      const float specials[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity(), -0.0f, 0.0f};
      acc[k] = k % 97 < 5 ? specials[k % 97] : rng.normal(0.0f, 2.0f);
    }
    for (auto mode : {RoundingMode::NearestEven, RoundingMode::Stochastic, RoundingMode::TowardZero}) {
      const FloatCodec codec(f, mode);
#if defined(__AVX512F__) && defined(__AVX512BW__)
      // The register path is what this test is for: nearest rounding of every code of <= 8
      // bits whose quantum fp32 holds as a normal number takes it.
      if (mode == RoundingMode::NearestEven && f.bits() <= 8) {
        EXPECT_TRUE(codec.roundTripsInRegisters()) << f.describe();
      }
#endif
      for (bool add : {false, true}) {
        const auto n = static_cast<int64_t>(xs.size());
        const int64_t bad = firstRoundTripMismatch(codec, xs.data(), n, acc.data(), add, ctx);
        ASSERT_LT(bad, 0) << codec.name() << " " << f.describe() << " add " << add << ": x bits " << std::hex
                          << (bad < n ? std::bit_cast<uint32_t>(xs[static_cast<size_t>(bad)]) : 0u);
        for (int64_t len : {1, 15, 16, 17, 31, 33, 63, 64, 65, 129}) {
          for (int64_t start : {0, 3}) {
            const int64_t at =
                firstRoundTripMismatch(codec, xs.data() + n - 200 + start, len, acc.data() + start, add, ctx);
            ASSERT_LT(at, 0) << codec.name() << " length " << len << " start " << start << " add " << add;
          }
        }
      }
    }
  }
}

// The simulator's owners round a run of consecutive owners' values in one call where the codec
// promises that any cut is alike (Codec::roundTripsAlikeAtAnyCut), and a real rank decodes and
// adds each owner's chunk on its own. So a call cut anywhere (the second piece's context
// advanced to its start) must give the whole call's bits, for decodeAdd and roundTripInto,
// where both the sum and the value are NaNs of either sign too (a decoded NaN is kept).
TEST(CodecVectorPaths, DecodeAddAndRoundTripIntoAreAlikeAtEveryCut) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const int64_t n = 100;
  Rng rng(23);
  std::vector<float> xs(static_cast<size_t>(n)), acc(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<size_t>(i);
    xs[k] = std::ldexp(rng.normal(), static_cast<int>(rng.below(50)) - 25);
    acc[k] = rng.normal(0.0f, 4.0f);
  }
  // NaN value onto NaN sums of both signs (in the vector steps and the last ones), a NaN onto
  // a number and a number onto a NaN, infinities, an overflow and an invalid sum.
  for (int64_t i : {5, 40, 97, 98}) xs[static_cast<size_t>(i)] = i % 2 ? nan : -nan;
  for (int64_t i : {5, 40, 97, 99}) acc[static_cast<size_t>(i)] = i % 3 ? -nan : nan;
  xs[10] = nan, xs[11] = inf, acc[11] = -inf, xs[12] = 3e38f, acc[13] = nan, xs[60] = -inf;
  const EncodeContext ctx{5, 6, 1000};
  auto bitsOf = [](const std::vector<float>& v) {
    std::vector<uint32_t> b;
    for (float x : v) b.push_back(std::bit_cast<uint32_t>(x));
    return b;
  };
  std::vector<FloatFormat> formats = vectorPathFormats();
  formats.push_back(FloatFormat::preset("fp32"));  // its own bits on the wire
  for (const auto& f : formats) {
    for (auto mode : {RoundingMode::NearestEven, RoundingMode::Stochastic}) {
      const FloatCodec codec(f, mode);
      EXPECT_EQ(codec.roundTripsAlikeAtAnyCut(), f.bits() > 4) << f.describe();
      if (!codec.roundTripsAlikeAtAnyCut()) continue;
      std::vector<uint8_t> wire(codec.encodedBytes(n));
      std::vector<float> alone(static_cast<size_t>(n));  // the values themselves
      codec.encode(xs.data(), n, wire.data(), ctx);
      codec.decode(wire.data(), n, alone.data());
      for (bool add : {false, true}) {
        std::vector<float> whole = acc, decoded = acc;
        codec.roundTripInto(xs.data(), n, whole.data(), add, wire.data(), ctx);
        codec.encode(xs.data(), n, wire.data(), ctx);
        if (add) {
          codec.decodeAdd(wire.data(), n, decoded.data());
        } else {
          codec.decode(wire.data(), n, decoded.data());
        }
        ASSERT_EQ(bitsOf(whole), bitsOf(decoded)) << codec.name() << " " << f.describe() << " add " << add;
        if (add) {
          // A decoded NaN is kept, whatever the sum held (formats without NaNs have none).
          for (int64_t i : {5, 40, 97}) {
            const auto k = static_cast<size_t>(i);
            if (!std::isnan(alone[k])) continue;
            EXPECT_EQ(std::bit_cast<uint32_t>(whole[k]), std::bit_cast<uint32_t>(alone[k]) | 0x00400000u)
                << codec.name() << " at " << i;
          }
        }
        for (int64_t cut = 1; cut < n; ++cut) {
          EncodeContext rest = ctx;
          rest.offset = ctx.offset + cut;
          std::vector<float> pieces = acc, piecesDecoded = acc;
          codec.roundTripInto(xs.data(), cut, pieces.data(), add, wire.data(), ctx);
          codec.roundTripInto(xs.data() + cut, n - cut, pieces.data() + cut, add, wire.data(), rest);
          ASSERT_EQ(bitsOf(pieces), bitsOf(whole)) << codec.name() << " " << f.describe() << " cut " << cut;
          for (const auto& [begin, end, c] : {std::tuple{int64_t{0}, cut, ctx}, std::tuple{cut, n, rest}}) {
            codec.encode(xs.data() + begin, end - begin, wire.data(), c);
            if (add) {
              codec.decodeAdd(wire.data(), end - begin, piecesDecoded.data() + begin);
            } else {
              codec.decode(wire.data(), end - begin, piecesDecoded.data() + begin);
            }
          }
          ASSERT_EQ(bitsOf(piecesDecoded), bitsOf(whole)) << codec.name() << " decode, cut " << cut;
        }
      }
    }
  }
}

// The simulator keeps its ranks' gradient copies as sticky 16-bit keys where the codec says
// they round exactly: widened and scaled by any power of two, the key of any value but an
// fp32 subnormal (which the copier keeps whole, and flags) must round trip to the bits the
// full value plus zero does (-0 keys as +0, as a gradient written over a zeroed .grad is 0 + g),
// for every qualifying format, NaNs and infinities included; and the copy measures the full
// values' maximum.
TEST(CodecVectorPaths, Sticky16KeysRoundLikeTheirValuesAtEveryShift) {
  std::vector<float> xs;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65537) {
    const auto u = static_cast<uint32_t>(b);
    if ((u & 0x7f800000u) != 0 || (u & 0x7fffffu) == 0) xs.push_back(std::bit_cast<float>(u));
  }
  Rng rng(13);
  for (int e = -40; e <= 40; e += 4)
    for (int k = 0; k < 200; ++k) xs.push_back(std::ldexp(rng.normal(0.0f, 1.0f), e));
  xs.push_back(-0.0f);
  xs.push_back(std::numeric_limits<float>::min());
  const auto n = static_cast<int64_t>(xs.size());
  std::vector<uint16_t> keys(xs.size());
  std::vector<float> copy(xs.size());
  bool subnormals = true;
  ASSERT_EQ(copyMaxAbsBitsSticky16(keys.data(), xs.data(), n, &subnormals), copyMaxAbsBits(copy.data(), xs.data(), n));
  EXPECT_FALSE(subnormals);
  // A subnormal among 16 values a step (the vector path) and in the rest (scalar).
  for (size_t at : {size_t{2}, size_t{20}, size_t{37}}) {
    std::vector<float> some(40, 1.5f);
    some[5] = 0.0f;
    some[at] = -std::numeric_limits<float>::denorm_min();
    subnormals = false;
    copyMaxAbsBitsSticky16(keys.data(), some.data(), 40, &subnormals);
    EXPECT_TRUE(subnormals) << at;
  }
  copyMaxAbsBitsSticky16(keys.data(), xs.data(), n, &subnormals);
  std::vector<float> widened(xs.size()), plusZero(xs.size());
  widenSticky16(keys.data(), widened.data(), n);
  for (size_t i = 0; i < xs.size(); ++i) plusZero[i] = 0.0f + xs[i];
  // -0 among 16 values a step (the vector path) and in the rest (scalar) keys as +0.
  for (size_t at : {size_t{3}, size_t{33}}) {
    std::vector<float> some(40, -1.5f);
    some[at] = -0.0f;
    copyMaxAbsBitsSticky16(keys.data(), some.data(), 40, &subnormals);
    EXPECT_EQ(keys[at], 0) << at;
    EXPECT_EQ(keys[at + 1], 0xbfc0) << at;
  }
  copyMaxAbsBitsSticky16(keys.data(), xs.data(), n, &subnormals);
  int exact = 0;
  for (const auto& f : vectorPathFormats()) {
    for (auto mode : {RoundingMode::NearestEven, RoundingMode::Stochastic, RoundingMode::TowardZero}) {
      const FloatCodec codec(f, mode);
      if (!codec.roundsSticky16Exactly()) continue;
      ++exact;
      std::vector<float> a(xs.size()), b(xs.size()), ra(xs.size()), rb(xs.size());
      std::vector<uint8_t> scratch(codec.encodedBytes(n));
      for (int shift : {-140, -126, -60, -9, -1, 0, 1, 7, 30, 100, 127, 140}) {
        scaleByPowerOfTwo(plusZero.data(), a.data(), n, shift);
        scaleByPowerOfTwo(widened.data(), b.data(), n, shift);
        codec.roundTripInto(a.data(), n, ra.data(), false, scratch.data());
        codec.roundTripInto(b.data(), n, rb.data(), false, scratch.data());
        for (int64_t i = 0; i < n; ++i) {
          const auto k = static_cast<size_t>(i);
          ASSERT_EQ(std::bit_cast<uint32_t>(ra[k]), std::bit_cast<uint32_t>(rb[k]))
              << f.describe() << " shift " << shift << " x bits " << std::hex << std::bit_cast<uint32_t>(xs[k]);
        }
      }
    }
  }
  // Nearest rounding to E4M3, E5M2, E2M1, E3M0, E3M2, E2M3 (and their variants) qualifies;
  // fp16 and bf16 keep more mantissa bits than a key, stochastic rounding reads the low bits.
  EXPECT_TRUE(FloatCodec(FloatFormat::preset("e4m3"), RoundingMode::NearestEven).roundsSticky16Exactly());
  EXPECT_TRUE(FloatCodec(FloatFormat::preset("e2m1"), RoundingMode::NearestEven).roundsSticky16Exactly());
  EXPECT_FALSE(FloatCodec(FloatFormat::preset("bf16"), RoundingMode::NearestEven).roundsSticky16Exactly());
  EXPECT_FALSE(FloatCodec(FloatFormat::preset("fp16"), RoundingMode::NearestEven).roundsSticky16Exactly());
  EXPECT_FALSE(FloatCodec(FloatFormat::preset("e4m3"), RoundingMode::Stochastic).roundsSticky16Exactly());
  EXPECT_GE(exact, 8);
}

// The block codecs' absmax (Dettmers' types, the block-scaled formats): every length around the
// 16-value steps, the largest magnitude at every position (whole steps and the masked tail), a
// negative one, and the non-finite order NaN > inf > finite of the integer max.
TEST(CodecVectorPaths, MaxAbsBitsIsTheLargestMagnitudeAtEveryLengthAndPosition) {
  const float big[] = {-3.5f, 7.0f, -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::denorm_min()};
  for (int64_t n : {0, 1, 15, 16, 17, 31, 32, 33, 47, 64, 100, 1000}) {
    std::vector<float> xs(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) xs[i] = (i % 3 == 0 ? -0.25f : 0.125f) * static_cast<float>(i % 7) * 1e-3f;
    const auto reference = [&] {
      uint32_t m = 0;
      for (float x : xs) m = std::max(m, kernels::absBits(x));
      return m;
    };
    EXPECT_EQ(maxAbsBits(xs.data(), n), reference()) << n;
    for (int64_t at = 0; at < n; at += (n > 64 ? 13 : 1)) {
      const float was = xs[at];
      for (float b : big) {
        xs[at] = b;
        EXPECT_EQ(maxAbsBits(xs.data(), n), reference()) << n << " " << at << " " << b;
      }
      xs[at] = was;
    }
  }
  std::vector<float> zeros(40, -0.0f);
  EXPECT_EQ(maxAbsBits(zeros.data(), 40), 0u);
}

// The simulator's owners round those keys widened and scaled in registers
// (Codec::roundTripKeysInto): every one of the 65536 keys, at shifts across fp32's range, stored
// and added, with a last step shorter than 16, must give what widening, scaling by
// scaleByPowerOfTwo and roundTripInto give; a shift whose factor is not a normal float is left
// to the caller, untouched.
TEST(CodecVectorPaths, KeysRoundInRegistersAsWidenedScaledValues) {
  const int64_t n = 65536 + 7;
  std::vector<uint16_t> keys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) keys[static_cast<size_t>(i)] = static_cast<uint16_t>(i * 40503);  // a permutation
  std::vector<float> acc(static_cast<size_t>(n)), widened(static_cast<size_t>(n)), scaled(static_cast<size_t>(n));
  Rng rng(29);
  for (float& a : acc) a = rng.normal(0.0f, 8.0f);
  widenSticky16(keys.data(), widened.data(), n);
  std::vector<uint8_t> wire(static_cast<size_t>(n));
  int inRegisters = 0;
  for (const auto& f : vectorPathFormats()) {
    const FloatCodec codec(f, RoundingMode::NearestEven);
    for (int shift : {-126, -60, -7, 0, 3, 40, 127}) {
      scaleByPowerOfTwo(widened.data(), scaled.data(), n, shift);
      for (bool add : {false, true}) {
        std::vector<float> got = acc, want = acc;
        if (!codec.roundTripKeysInto(keys.data(), n, shift, got.data(), add)) {
          EXPECT_EQ(std::memcmp(got.data(), acc.data(), got.size() * sizeof(float)), 0) << codec.name();
          continue;
        }
        ++inRegisters;
        codec.roundTripInto(scaled.data(), n, want.data(), add, wire.data());
        for (size_t k = 0; k < got.size(); ++k) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[k]), std::bit_cast<uint32_t>(want[k]))
              << codec.name() << " shift " << shift << " add " << add << " key " << std::hex << keys[k];
        }
      }
    }
    for (int shift : {-127, 128}) {
      std::vector<float> got = acc;
      EXPECT_FALSE(codec.roundTripKeysInto(keys.data(), n, shift, got.data(), true)) << codec.name() << shift;
      EXPECT_EQ(std::memcmp(got.data(), acc.data(), got.size() * sizeof(float)), 0) << codec.name();
    }
  }
#if defined(__AVX512F__) && defined(__AVX512BW__)
  EXPECT_TRUE(FloatCodec(FloatFormat::preset("e4m3"), RoundingMode::NearestEven)
                  .roundTripKeysInto(keys.data(), 0, 0, acc.data(), true));
  EXPECT_GT(inRegisters, 100);
#endif
}

TEST(CodecVectorPaths, DecodeGivesTheSharedDecodeOfEveryCodeInEveryPosition) {
  // Every code (every byte value for nibble formats, so both nibble positions) in a buffer long
  // enough for the vector loops, with a tail, against kernels::decodeCode.
  for (const auto& f : vectorPathFormats()) {
    const FloatCodec codec(f, RoundingMode::NearestEven);
    const int width = codec.bytesPerValue();
    const uint32_t mask = (1u << f.bits()) - 1;
    const int64_t codes = width == 2 ? 65536 : 256;
    const int64_t n = (width == 0 ? 2 * codes : codes) * 2 + 7;
    std::vector<uint8_t> wire(codec.encodedBytes(n));
    for (size_t k = 0; k < wire.size(); ++k) wire[k] = static_cast<uint8_t>(k * 7 + k / 256);
    std::vector<float> out(static_cast<size_t>(n));
    codec.decode(wire.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      uint32_t c = 0;
      if (width == 0) c = (wire[static_cast<size_t>(i / 2)] >> (4 * (i % 2))) & 15u;
      if (width == 1) c = wire[static_cast<size_t>(i)];
      if (width == 2) c = wire[static_cast<size_t>(2 * i)] | (uint32_t{wire[static_cast<size_t>(2 * i + 1)]} << 8);
      ASSERT_EQ(std::bit_cast<uint32_t>(out[static_cast<size_t>(i)]),
                std::bit_cast<uint32_t>(kernels::decodeCode(c & mask, codec.decodeParams())))
          << f.describe() << " element " << i << " code " << c;
    }
  }
}

TEST(CodecVectorPaths, RandomBitsBlockMatchesRandomBits32AcrossTheLowWordWrap) {
  // Starts of every residue mod 4, where the block counter's low word wraps (element 2^34) and
  // where the 64-bit counter does; lengths with and without whole 64-element steps.
  for (uint64_t first : {uint64_t{0xffffffffu} - 40, (uint64_t{2} << 32) - 17, ~uint64_t{0} - 70,
                         (uint64_t{1} << 34) - 100, (uint64_t{1} << 34) - 98, (uint64_t{1} << 34) - 97}) {
    for (int64_t n : {3, 70, 200}) {
      std::vector<uint32_t> bits(static_cast<size_t>(n));
      randomBitsBlock(bits.data(), n, 0x0123456789abcdefull, 77, first);
      for (uint64_t i = 0; i < static_cast<uint64_t>(n); ++i)
        ASSERT_EQ(bits[i], randomBits32(0x0123456789abcdefull, 77, first + i)) << first << " + " << i;
    }
  }
}

TEST(CodecVectorPaths, RandomBitsAreTheFourWordsOfOnePhiloxBlockPerFourElements) {
  // randomBits32's definition, against the Philox block itself: element 4b + w is word w of
  // block b, so consecutive elements never share a word and four share a block.
  for (uint64_t block : {uint64_t{0}, uint64_t{12345}, (uint64_t{1} << 32) - 1, ~uint64_t{0} >> 2}) {
    uint32_t words[4];
    philox4x32(99, 5, block, words);
    for (uint64_t w = 0; w < 4; ++w) EXPECT_EQ(randomBits32(99, 5, 4 * block + w), words[w]) << block << " " << w;
  }
}

TEST(CodecVectorPaths, BlockScaledAgreesWithTheSharedScaleArithmetic) {
  // Blocks with zeros, infinities, NaNs, tiny and huge magnitudes, and a partial last block.
  Rng rng(5);
  std::vector<float> xs(32 * 40 + 9);
  for (size_t i = 0; i < xs.size(); ++i) {
    xs[i] = std::ldexp(rng.normal(0.0f, 1.0f), static_cast<int>(i / 32) * 7 - 140);
  }
  for (size_t i = 0; i < 32; ++i) xs[32 * 3 + i] = 0.0f;
  xs[32 * 5 + 3] = std::numeric_limits<float>::infinity();
  xs[32 * 6 + 30] = std::numeric_limits<float>::quiet_NaN();
  // Then every 4099th fp32 bit pattern: blocks of neighbours in bit order, so the scales cover
  // every exponent and the scaled values every rounding case, subnormal results included.
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  // MX's 32, an odd length, and blocks longer than a step (2048 values): odd ones, whose
  // windows of two blocks start on an element byte, ones whose sums the fused step keeps, ones
  // it decodes twice (past 65536 values), and one scale for the whole call (0).
  const auto n = static_cast<int64_t>(xs.size());
  for (int64_t blockSize : {32, 7, 2049, 4097, 40000, 70001, 0}) {
    const int64_t len = blockSize > 0 ? blockSize : n;
    for (const char* element : {"e2m1", "e3m0", "e4m3"}) {
      if (blockSize != 32 && std::string_view(element) == "e3m0") continue;
      const FloatFormat f = FloatFormat::preset(element);
      for (auto mode : {RoundingMode::NearestEven, RoundingMode::Stochastic}) {
        const BlockScaledCodec codec(f, mode, blockSize);
        FloatFormat saturating = f;
        saturating.overflow = Overflow::Saturate;
        const FloatCodec elements(saturating, mode);
        const int64_t blocks = (n + len - 1) / len;
        std::vector<uint8_t> expected(codec.encodedBytes(n)), got(expected.size());
        std::vector<float> scaled(xs.size());
        for (int64_t b = 0; b < blocks; ++b) {
          uint32_t amax = 0;
          for (int64_t i = len * b; i < std::min(n, len * b + len); ++i) amax = std::max(amax, kernels::absBits(xs[i]));
          const uint32_t code = kernels::blockScaleCode(amax, f.maxExponent());
          expected[static_cast<size_t>(b)] = static_cast<uint8_t>(code);
          for (int64_t i = len * b; i < std::min(n, len * b + len); ++i)
            scaled[i] = kernels::blockScaledInput(xs[i], code);
        }
        const EncodeContext ctx{1, 2, 3};
        ASSERT_LT(firstEncodeMismatch(elements, scaled.data(), n, ctx), 0);
        elements.encode(scaled.data(), n, expected.data() + blocks, ctx);
        codec.encode(xs.data(), n, got.data(), ctx);
        ASSERT_EQ(got, expected) << codec.name();
        std::vector<float> decoded(xs.size());
        codec.decode(got.data(), n, decoded.data());
        std::vector<float> elementValues(xs.size());
        elements.decode(got.data() + blocks, n, elementValues.data());
        for (int64_t i = 0; i < n; ++i) {
          const float want = kernels::blockScaledOutput(elementValues[i], got[static_cast<size_t>(i / len)]);
          ASSERT_EQ(std::bit_cast<uint32_t>(decoded[i]), std::bit_cast<uint32_t>(want)) << codec.name() << " " << i;
        }
        // decodeAdd adds the decoded values (checked above) to finite sums; decodeAddEncode of the
        // wire with itself reversed is the encoding (checked above) of the decoded sums.
        std::vector<float> acc(xs.size()), sums(xs.size());
        for (size_t i = 0; i < acc.size(); ++i) acc[i] = static_cast<float>(i % 13) - 6.5f;
        std::vector<float> added = acc;
        codec.decodeAdd(got.data(), n, added.data());
        for (int64_t i = 0; i < n; ++i) {
          const float want = acc[i] + decoded[i];
          ASSERT_EQ(std::bit_cast<uint32_t>(added[i]), std::bit_cast<uint32_t>(want)) << codec.name() << " " << i;
        }
        std::vector<float> reversed(xs.rbegin(), xs.rend()), other(xs.size());
        std::vector<uint8_t> b(got.size());
        codec.encode(reversed.data(), n, b.data(), ctx);
        codec.decode(b.data(), n, other.data());
        std::vector<bool> bothNan(xs.size());
        for (size_t i = 0; i < sums.size(); ++i) {
          sums[i] = decoded[i] + other[i];
          bothNan[i] = std::isnan(decoded[i]) && std::isnan(other[i]);  // the sum's sign: either NaN's
        }
        std::vector<uint8_t> wantWire(got.size()), fused = got;
        codec.encode(sums.data(), n, wantWire.data(), ctx);
        codec.decodeAddEncode(fused.data(), b.data(), n, fused.data(), ctx);
        for (int64_t i = 0; i < n; ++i) {
          if (bothNan[static_cast<size_t>(i)]) continue;
          const auto k = static_cast<size_t>(blocks + (f.bits() <= 4 ? i / 2 : i));
          const int shift = f.bits() <= 4 ? 4 * static_cast<int>(i % 2) : 0;
          ASSERT_EQ((fused[k] >> shift) & (f.bits() <= 4 ? 15 : 255),
                    (wantWire[k] >> shift) & (f.bits() <= 4 ? 15 : 255))
              << codec.name() << " " << i;
        }
        for (int64_t blk = 0; blk < blocks; ++blk)
          ASSERT_EQ(fused[blk], wantWire[blk]) << codec.name() << " block " << blk;
      }
    }
  }
}

// The code of element i of a FloatCodec wire.
uint32_t codeAt(const FloatCodec& codec, const std::vector<uint8_t>& wire, int64_t i) {
  const auto k = static_cast<size_t>(i);
  if (codec.bytesPerValue() == 0) return (wire[k / 2] >> (4 * (k % 2))) & 15u;
  if (codec.bytesPerValue() == 1) return wire[k];
  return wire[2 * k] | (uint32_t{wire[2 * k + 1]} << 8);
}

TEST(CodecVectorPaths, DecodeAddAndDecodeAddEncodeAgreeWithTheSharedDecodeAndRounding) {
  // decodeAdd: acc + kernels::decodeCode of every code; decodeAddEncode: the scalar wire of
  // the sum of both decoded inputs (its rounding seeded from the context), out aliasing a.
  Rng rng(9);
  for (const auto& f : vectorPathFormats()) {
    for (auto mode : {RoundingMode::NearestEven, RoundingMode::Stochastic}) {
      const FloatCodec codec(f, mode);
      const uint32_t mask = (1u << f.bits()) - 1;
      const int64_t n = (codec.bytesPerValue() == 2 ? 65536 : 512) * 2 + 37;
      std::vector<uint8_t> a(codec.encodedBytes(n)), b(a.size());
      for (size_t k = 0; k < a.size(); ++k) {
        a[k] = static_cast<uint8_t>(k * 7 + k / 256);
        b[k] = static_cast<uint8_t>(rng.nextU32());
      }
      std::vector<float> acc(static_cast<size_t>(n)), sums(static_cast<size_t>(n));
      std::vector<bool> bothNan(static_cast<size_t>(n));
      for (auto& x : acc) x = rng.normal(0.0f, 3.0f);
      std::vector<float> got = acc;
      codec.decodeAdd(a.data(), n, got.data());
      for (int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<size_t>(i);
        const float va = kernels::decodeCode(codeAt(codec, a, i) & mask, codec.decodeParams());
        const float vb = kernels::decodeCode(codeAt(codec, b, i) & mask, codec.decodeParams());
        const float want = acc[k] + va;
        if (!std::isnan(want)) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[k]), std::bit_cast<uint32_t>(want)) << codec.name() << " " << i;
        } else {
          ASSERT_TRUE(std::isnan(got[k])) << codec.name() << " " << i;
        }
        sums[k] = va + vb;
        // Two NaNs: which one's sign the sum keeps depends on the operand order the compiler
        // picks (it treats the add as commutative), for the scalar loops as for the vector ones.
        bothNan[k] = std::isnan(va) && std::isnan(vb);
      }
      const EncodeContext ctx{5, 6, (int64_t{1} << 32) - 1000};
      std::vector<uint8_t> expected = scalarWire(codec, sums.data(), n, ctx);
      std::vector<uint8_t> out = a;
      codec.decodeAddEncode(out.data(), b.data(), n, out.data(), ctx);
      for (int64_t i = 0; i < n; ++i) {
        if (bothNan[static_cast<size_t>(i)]) continue;
        ASSERT_EQ(codeAt(codec, out, i), codeAt(codec, expected, i)) << codec.name() << " " << f.describe() << " " << i;
      }
    }
  }
}

// The fused step decodes byte codes through fp16 where every code embeds (the bits are checked
// against the table by the decode-add-encode test above); a decoder that fails its own check
// at construction falls back to the table permutes, which this test would notice.
TEST(CodecVectorPaths, FusedStepDecodesEmbeddableByteCodesThroughFp16) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__F16C__)
  const bool vector = true;
#else
  const bool vector = false;
#endif
  // e4m3: NaN is the one special (0x7f); e5m2: fp16's own inf, its NaNs one value; a custom
  // bias without specials: every code a scaled fp16 value.
  for (const char* name : {"e4m3", "e5m2"}) {
    EXPECT_EQ(FloatCodec(FloatFormat::preset(name), RoundingMode::Stochastic).decodesBytesThroughFp16(), vector)
        << name;
  }
  const auto e3m4 = FloatFormat::fromMap(
      {{"exponent_bits", "3"}, {"mantissa_bits", "4"}, {"bias", "2"}, {"specials", "none"}, {"overflow", "saturate"}});
  EXPECT_EQ(FloatCodec(e3m4, RoundingMode::NearestEven).decodesBytesThroughFp16(), vector);
  // Not: IEEE specials below fp16's (inf and NaNs, two values), codes without subnormals (the
  // smallest read differently in fp16, and not as one value), formats narrower than a byte.
  EXPECT_FALSE(FloatCodec(FloatFormat::preset("e4m3_ieee"), RoundingMode::NearestEven).decodesBytesThroughFp16());
  const auto flushed = FloatFormat::fromMap({{"preset", "e5m2"}, {"subnormals", "false"}});
  EXPECT_FALSE(FloatCodec(flushed, RoundingMode::NearestEven).decodesBytesThroughFp16());
  EXPECT_FALSE(FloatCodec(FloatFormat::preset("e3m2"), RoundingMode::NearestEven).decodesBytesThroughFp16());
}

// Blocks of 64 a vector path is most likely to get wrong: every code value and midpoint (ties
// between codes) and their neighbours at absmax 1, at 3 and at the smallest normal; zeros;
// one huge value among small ones; NaN; infinities; subnormal absmax (the inverse is inf);
// random normals.
std::vector<float> dettmersInputs(const DettmersCodec& codec) {
  std::vector<float> xs;
  const auto block = [&](std::vector<float> b) {
    b.resize(64, 0.0f);
    xs.insert(xs.end(), b.begin(), b.end());
  };
  for (float scale : {1.0f, 3.0f, std::numeric_limits<float>::min()}) {
    std::vector<float> probes;
    for (int k = 0; k < 256; ++k) {
      for (float c : {codec.codeBook()[k], k < 255 ? codec.midpoints()[k] : 1.0f}) {
        for (float y : {c, std::nextafter(c, -2.0f), std::nextafter(c, 2.0f)}) probes.push_back(y * scale);
      }
    }
    for (size_t k = 0; k < probes.size(); k += 63) {
      std::vector<float> b(probes.begin() + static_cast<int64_t>(k),
                           probes.begin() + static_cast<int64_t>(std::min(probes.size(), k + 63)));
      b.push_back(scale);  // the block's absmax is exactly the scale
      block(b);
    }
  }
  block({});
  block({0.0f, -0.0f});
  block({1e-30f, -2e-30f, std::numeric_limits<float>::max(), 5e-31f});
  block({std::numeric_limits<float>::quiet_NaN(), 1.0f, -0.5f});
  block({std::numeric_limits<float>::infinity(), 1.0f, -0.5f});
  block({-std::numeric_limits<float>::infinity(), 1.0f, 0.0f});
  block({std::bit_cast<float>(0x00000003u), -std::bit_cast<float>(0x00000002u), std::bit_cast<float>(0x00000001u)});
  block({std::bit_cast<float>(0x007fffffu), -std::bit_cast<float>(0x00400000u), 0.0f, 1e-44f});
  Rng rng(11);
  for (int k = 0; k < 64 * 40; ++k) xs.push_back(std::ldexp(rng.normal(0.0f, 1.0f), k / 64 * 3 - 60));
  return xs;
}

TEST(CodecVectorPaths, DettmersEncodeAgreesWithTheSharedKernels) {
  for (auto type : {DettmersCodec::Type::DynamicTree, DettmersCodec::Type::Linear, DettmersCodec::Type::StaticTree}) {
    // 64, 256 and one block: block by block; 7, 100 and 300: in groups of blocks, each lane
    // scaled by its own block's inverse.
    for (int64_t blockSize : {int64_t{64}, int64_t{256}, int64_t{100}, int64_t{0}, int64_t{7}, int64_t{300}}) {
      const DettmersCodec codec(type, blockSize);
      const std::vector<float> xs = dettmersInputs(codec);
      const auto check = [&](const std::vector<float>& in, int64_t n) {
        const std::vector<uint8_t> expected = dettmersWire(codec, in.data(), n);
        std::vector<uint8_t> got(expected.size() + 1, 0xa5);  // a guard byte past the end
        codec.encode(in.data(), n, got.data());
        ASSERT_EQ(got.back(), 0xa5) << codec.name() << " n " << n;
        got.pop_back();
        const auto bad = std::mismatch(got.begin(), got.end(), expected.begin()).first - got.begin();
        ASSERT_EQ(got, expected) << codec.name() << " n " << n << " first difference at byte " << bad;
      };
      for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{64}, int64_t{128}, int64_t{129}, int64_t{200}, int64_t{255},
                        static_cast<int64_t>(xs.size())}) {
        check(xs, n);
      }
      // +NaN first: the first block's scale is not finite, the rest of its group's are.
      std::vector<float> nanFirst = xs;
      nanFirst[0] = std::numeric_limits<float>::quiet_NaN();
      check(nanFirst, static_cast<int64_t>(nanFirst.size()));
    }
  }
}

TEST(CodecVectorPaths, DettmersDecodeGivesEveryCodeTimesTheScale) {
  // Every code in every position of a 64-value step (the byte-permute decode) and of a
  // 16-lane step, tails of both, and scales that are ordinary, zero, subnormal, infinite or
  // NaN; decodeAdd adds the separately rounded product.
  for (auto type : {DettmersCodec::Type::DynamicTree, DettmersCodec::Type::Linear, DettmersCodec::Type::StaticTree}) {
    const DettmersCodec codec(type, 0);
    const int64_t n = 256 * 65 + 53;
    for (float absmax : {1.0f, 3.7f, 0.0f, std::bit_cast<float>(0x00000101u), std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max()}) {
      std::vector<uint8_t> wire(codec.encodedBytes(n));
      std::memcpy(wire.data(), &absmax, 4);
      for (int64_t i = 0; i < n; ++i) wire[static_cast<size_t>(4 + i)] = static_cast<uint8_t>(i + i / 256);
      std::vector<float> out(static_cast<size_t>(n)), acc(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) acc[static_cast<size_t>(i)] = static_cast<float>(i % 7) - 3.3f;
      std::vector<float> sum = acc;
      codec.decode(wire.data(), n, out.data());
      codec.decodeAdd(wire.data(), n, sum.data());
      for (int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<size_t>(i);
        volatile float product = kernels::dettmersDecode(codec.codeBook()[wire[4 + k]], absmax);
        const float want = product;
        ASSERT_EQ(std::bit_cast<uint32_t>(out[k]), std::bit_cast<uint32_t>(want)) << codec.name() << " " << i;
        const float wantSum = acc[k] + want;
        ASSERT_EQ(std::bit_cast<uint32_t>(sum[k]), std::bit_cast<uint32_t>(wantSum)) << codec.name() << " " << i;
      }
    }
  }
}

TEST(CodecVectorPaths, DettmersDecodeAddEncodeIsEncodeOfTheDecodedSum) {
  for (auto type : {DettmersCodec::Type::DynamicTree, DettmersCodec::Type::Linear, DettmersCodec::Type::StaticTree}) {
    // 256 and one block: block by block; 7, 100 and 300: in groups of blocks.
    for (int64_t blockSize : {int64_t{256}, int64_t{100}, int64_t{0}, int64_t{7}, int64_t{300}}) {
      const DettmersCodec codec(type, blockSize);
      const std::vector<float> xs = dettmersInputs(codec);
      const auto n = static_cast<int64_t>(xs.size());
      std::vector<float> ys(xs.rbegin(), xs.rend());
      const std::vector<uint8_t> a = dettmersWire(codec, xs.data(), n), b = dettmersWire(codec, ys.data(), n);
      std::vector<float> da(xs.size()), db(xs.size());
      codec.decode(a.data(), n, da.data());
      codec.decode(b.data(), n, db.data());
      for (size_t i = 0; i < da.size(); ++i) da[i] += db[i];
      const std::vector<uint8_t> expected = dettmersWire(codec, da.data(), n);
      std::vector<uint8_t> got = a;  // out aliases a
      codec.decodeAddEncode(got.data(), b.data(), n, got.data());
      ASSERT_EQ(got, expected) << codec.name();
    }
  }
}

}  // namespace
}  // namespace aps::precision::testing
