#pragma once

#include "precision/Codec.h"

#include <cstdint>
#include <cstring>
#include <string>

namespace aps::comm::testing {

// A small 16-bit wire format for the comm tests, independent of precision/: the top half
// of an fp32 (bfloat16 layout) with round-to-nearest-even, so its unit roundoff is 2^-8.
// Stochastic rounding is emulated when `stochastic` is set, drawing from ctx so that tests
// can check that all ranks agree even when codecs use random bits.
class Half16Codec final : public precision::Codec {
 public:
  explicit Half16Codec(bool stochastic = false) : stochastic_(stochastic) {}

  std::string name() const override { return stochastic_ ? "test16sr" : "test16"; }
  size_t encodedBytes(int64_t n) const override { return static_cast<size_t>(n) * 2; }

  void encode(const float* in, int64_t n, uint8_t* out, const precision::EncodeContext& ctx = {}) const override {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = round(in[i], ctx, i);
      std::memcpy(out + 2 * i, &h, 2);
    }
  }
  void decode(const uint8_t* in, int64_t n, float* out) const override {
    for (int64_t i = 0; i < n; ++i) out[i] = value(in + 2 * i);
  }
  void decodeAdd(const uint8_t* in, int64_t n, float* acc) const override {
    for (int64_t i = 0; i < n; ++i) acc[i] += value(in + 2 * i);
  }
  void decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                       const precision::EncodeContext& ctx = {}) const override {
    for (int64_t i = 0; i < n; ++i) {
      const float s = value(a + 2 * i) + value(b + 2 * i);
      const uint16_t h = round(s, ctx, i);
      std::memcpy(out + 2 * i, &h, 2);
    }
  }

  // Element-wise, random bits indexed by ctx.offset + i: any cut.
  int64_t splitGranule() const override { return 1; }

  static constexpr double kUnitRoundoff = 1.0 / 256.0;

 private:
  static float value(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  uint16_t round(float f, const precision::EncodeContext& ctx, int64_t i) const {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays NaN
    uint32_t add = 0x7fffu + ((bits >> 16) & 1u);
    if (stochastic_) add = mix(ctx.seed, ctx.stream, static_cast<uint64_t>(ctx.offset + i)) & 0xffffu;
    return static_cast<uint16_t>((bits + add) >> 16);
  }
  static uint32_t mix(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull ^ b * 0xBF58476D1CE4E5B9ull ^ c * 0x94D049BB133111EBull;
    z ^= z >> 31;
    z *= 0xD6E8FEB86659FD93ull;
    z ^= z >> 32;
    return static_cast<uint32_t>(z);
  }
  bool stochastic_;
};

}  // namespace aps::comm::testing
