#pragma once

// Shared by the codec vector-path tests (CodecVectorPathsTest.cpp, the default run's sweep, and
// CodecExhaustiveTest.cpp, every fp32 input): the formats whose vector paths are checked and
// the wire a codec must produce, built from the scalar core alone.
#include "framework/core/Rng.h"
#include "precision/DettmersCodec.h"
#include "precision/FloatCodec.h"
#include "precision/kernels/Dettmers.h"
#include "framework/numerics/FloatRounding.h"
#include "precision/kernels/Scaling.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

namespace aps::precision::testing {

// The wire codecs' formats, plus layouts that take other branches of the kernels (no
// subnormals, saturation, odd biases, no specials).
inline std::vector<FloatFormat> vectorPathFormats() {
  std::vector<FloatFormat> formats;
  for (const char* name : {"fp16", "bf16", "e4m3", "e5m2", "e2m1", "e3m0", "e4m3_ieee", "e3m2", "e2m3"}) {
    formats.push_back(FloatFormat::preset(name));
  }
  formats.push_back(FloatFormat::fromMap({{"preset", "e5m2"}, {"subnormals", "false"}}));
  formats.push_back(FloatFormat::fromMap({{"preset", "e2m1"}, {"subnormals", "false"}}));
  formats.push_back(FloatFormat::fromMap({{"preset", "e4m3"}, {"overflow", "saturate"}}));
  formats.push_back(FloatFormat::fromMap({{"preset", "fp16"}, {"overflow", "saturate"}}));
  formats.push_back(FloatFormat::fromMap({{"preset", "bf16"}, {"overflow", "saturate"}}));
  formats.push_back(FloatFormat::fromMap({{"preset", "bf16"}, {"subnormals", "false"}, {"overflow", "saturate"}}));
  formats.push_back(FloatFormat::fromMap({{"exponent_bits", "3"}, {"mantissa_bits", "4"}, {"bias", "2"}}));
  formats.push_back(FloatFormat::fromMap(
      {{"exponent_bits", "3"}, {"mantissa_bits", "4"}, {"bias", "2"}, {"specials", "none"}, {"overflow", "saturate"}}));
  formats.push_back(FloatFormat::fromMap({{"exponent_bits", "6"}, {"mantissa_bits", "5"}, {"bias", "40"}}));
  formats.push_back(FloatFormat::fromMap(
      {{"exponent_bits", "2"}, {"mantissa_bits", "2"}, {"specials", "none"}, {"overflow", "saturate"}}));
  return formats;
}

// The bytes codec.encode(in, n, ctx) must write: kernels::roundCode of each value with
// randomBits32(seed, stream, offset + i), packed by the codec's width.
inline std::vector<uint8_t> scalarWire(const FloatCodec& codec, const float* in, int64_t n, const EncodeContext& ctx) {
  std::vector<uint8_t> wire(codec.encodedBytes(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = codec.rounding() == RoundingMode::Stochastic
                              ? randomBits32(ctx.seed, ctx.stream, static_cast<uint64_t>(ctx.offset + i))
                              : 0u;
    const uint32_t c = kernels::roundCode(in[i], codec.rounding(), bits, codec.roundingParams());
    const auto k = static_cast<size_t>(i);
    if (codec.bytesPerValue() == 0) {
      wire[k / 2] = static_cast<uint8_t>(wire[k / 2] | (c << (4 * (k % 2))));
    } else if (codec.bytesPerValue() == 1) {
      wire[k] = static_cast<uint8_t>(c);
    } else {
      wire[2 * k] = static_cast<uint8_t>(c);
      wire[2 * k + 1] = static_cast<uint8_t>(c >> 8);
    }
  }
  return wire;
}

// Index of the first value whose encoded bytes differ from the scalar wire, or -1.
inline int64_t firstEncodeMismatch(const FloatCodec& codec, const float* in, int64_t n, const EncodeContext& ctx) {
  const std::vector<uint8_t> expected = scalarWire(codec, in, n, ctx);
  std::vector<uint8_t> got(expected.size() + 1, 0xa5);  // a guard byte past the end
  codec.encode(in, n, got.data(), ctx);
  if (got.back() != 0xa5) return n;
  // The same bytes at an odd address (wire buffers hold codes at any byte offset; two-byte
  // codes take another path there).
  std::vector<uint8_t> odd(expected.size() + 2, 0xa5);
  codec.encode(in, n, odd.data() + 1, ctx);
  if (odd.back() != 0xa5 || !std::equal(got.begin(), got.end() - 1, odd.begin() + 1)) return n;
  // n == 0: both empty (memcmp must not see the empty vector's null data pointer).
  if (expected.empty() || std::memcmp(got.data(), expected.data(), expected.size()) == 0) return -1;
  for (size_t k = 0; k < expected.size(); ++k) {
    if (got[k] != expected[k]) {
      const int64_t perValue = codec.bytesPerValue();
      return perValue == 0 ? static_cast<int64_t>(2 * k) : static_cast<int64_t>(k) / perValue;
    }
  }
  return -1;
}

// Index of the first value where roundTripInto differs from encode then decode (add false)
// or decodeAdd onto `acc` (add true), bit for bit, NaNs included, or -1; n for a write past
// the end.
inline int64_t firstRoundTripMismatch(const FloatCodec& codec, const float* in, int64_t n, const float* acc, bool add,
                                      const EncodeContext& ctx) {
  std::vector<uint8_t> wire(codec.encodedBytes(n) + 1);
  std::vector<float> want(acc, acc + n);
  codec.encode(in, n, wire.data(), ctx);
  if (add) {
    codec.decodeAdd(wire.data(), n, want.data());
  } else {
    codec.decode(wire.data(), n, want.data());
  }
  std::vector<float> got(acc, acc + n);
  got.push_back(-7.0f);  // a guard past the end
  codec.roundTripInto(in, n, got.data(), add, wire.data(), ctx);
  if (std::bit_cast<uint32_t>(got.back()) != std::bit_cast<uint32_t>(-7.0f)) return n;
  for (int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<size_t>(i);
    if (std::bit_cast<uint32_t>(got[k]) != std::bit_cast<uint32_t>(want[k])) return i;
  }
  return -1;
}

// Dettmers' wire from the shared kernels alone: per block the integer max of |bits|, its
// inverse, and the binary search over the midpoints for each scaled value.
inline std::vector<uint8_t> dettmersWire(const DettmersCodec& codec, const float* in, int64_t n) {
  std::vector<uint8_t> wire(codec.encodedBytes(n));
  const int64_t block = codec.blockSize() > 0 ? codec.blockSize() : std::max<int64_t>(n, 1);
  for (int64_t begin = 0; begin < n; begin += block) {
    const int64_t m = std::min(block, n - begin);
    uint8_t* out = wire.data() + begin + 4 * (begin / block);
    uint32_t maxBits = 0;
    for (int64_t i = 0; i < m; ++i) maxBits = std::max(maxBits, kernels::absBits(in[begin + i]));
    std::memcpy(out, &maxBits, 4);
    const float inv = kernels::dettmersInverse(std::bit_cast<float>(maxBits));
    for (int64_t i = 0; i < m; ++i) {
      const float v = in[begin + i] * inv;
      out[4 + i] = static_cast<uint8_t>(kernels::dettmersNearestCode(v, codec.midpoints().data(), codec.topCode()));
    }
  }
  return wire;
}

}  // namespace aps::precision::testing
