#include "precision/BlockScaledCodec.h"

#include "framework/core/Error.h"
#include "precision/ApsScaler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace aps::precision {

namespace {

FloatFormat saturating(FloatFormat f) {
  f.overflow = Overflow::Saturate;
  return f;
}

// Scratch for the scaled values of one call (codecs are shared by threads: one per thread).
std::vector<float>& scratch(int which, int64_t n) {
  thread_local std::vector<float> buffers[2];
  auto& b = buffers[which];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b;
}

}  // namespace

BlockScaledCodec::BlockScaledCodec(const FloatFormat& element, RoundingMode rounding, int64_t blockSize)
    : elements_(saturating(element), rounding), blockSize_(blockSize), emax_(element.maxExponent()) {
  APS_CHECK(blockSize >= 0, "block scaling: block_size = {} must be >= 0 (0: one scale per chunk)", blockSize);
  APS_CHECK(!element.isFp32() && element.bits() <= 16,
            "block scaling: the element format must be narrower than fp32 and at most 16 bits, not {}", element.name);
}

std::string BlockScaledCodec::name() const {
  if (elements_.rounding() == RoundingMode::NearestEven) return fmt::format("{}/block{}", element().name, blockSize_);
  return fmt::format("{}:{}/block{}", element().name, roundingModeName(elements_.rounding()), blockSize_);
}

size_t BlockScaledCodec::encodedBytes(int64_t n) const {
  APS_ASSERT(n >= 0);
  return static_cast<size_t>(blocks(n)) + elements_.encodedBytes(n);
}

uint8_t BlockScaledCodec::scaleCode(float amax) const {
  if (!(amax <= std::numeric_limits<float>::max())) return kNanScale;  // inf or NaN
  if (amax == 0.0f) return kScaleBias;                                  // any scale keeps zeros: 2^0
  int k = 0;
  std::frexp(amax, &k);  // amax = f 2^k, f in [0.5, 1): floor(log2(amax)) = k - 1
  const int e = std::clamp(k - 1 - emax_, -kScaleBias, kScaleBias);
  return static_cast<uint8_t>(e + kScaleBias);
}

void BlockScaledCodec::encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx) const {
  const int64_t len = blockLength(n);
  std::vector<float>& scaled = scratch(0, n);
  for (int64_t b = 0, begin = 0; begin < n; ++b, begin += len) {
    const int64_t m = std::min(len, n - begin);
    float amax = 0.0f;
    for (int64_t i = 0; i < m; ++i) {
      const float a = std::fabs(in[begin + i]);
      amax = std::isnan(a) || a > amax ? a : amax;
      if (std::isnan(a)) break;
    }
    const uint8_t code = scaleCode(amax);
    out[b] = code;
    if (code == kNanScale) {
      std::fill(scaled.begin() + begin, scaled.begin() + begin + m, 0.0f);
    } else {
      scaleByPowerOfTwo(in + begin, scaled.data() + begin, m, kScaleBias - code);
    }
  }
  elements_.encode(scaled.data(), n, out + blocks(n), ctx);
}

void BlockScaledCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const int64_t len = blockLength(n);
  elements_.decode(in + blocks(n), n, out);
  for (int64_t b = 0, begin = 0; begin < n; ++b, begin += len) {
    const int64_t m = std::min(len, n - begin);
    if (in[b] == kNanScale) {
      std::fill(out + begin, out + begin + m, std::numeric_limits<float>::quiet_NaN());
    } else {
      scaleByPowerOfTwo(out + begin, m, static_cast<int>(in[b]) - kScaleBias);
    }
  }
}

void BlockScaledCodec::decodeAdd(const uint8_t* in, int64_t n, float* acc) const {
  std::vector<float>& values = scratch(1, n);
  decode(in, n, values.data());
  for (int64_t i = 0; i < n; ++i) acc[i] += values[static_cast<size_t>(i)];
}

void BlockScaledCodec::decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                                       const EncodeContext& ctx) const {
  std::vector<float> sum(static_cast<size_t>(n));
  decode(a, n, sum.data());
  decodeAdd(b, n, sum.data());
  encode(sum.data(), n, out, ctx);
}

}  // namespace aps::precision
