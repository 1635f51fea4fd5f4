#include "precision/BlockScaledCodec.h"

#include "framework/core/Error.h"
#include "precision/ApsScaler.h"
#include "precision/kernels/Scaling.h"

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
  return static_cast<uint8_t>(kernels::blockScaleCode(kernels::absBits(amax), emax_));
}

// The block's scale and each element's scaled value are kernels::blockScaleCode and
// kernels::blockScaledInput / blockScaledOutput (precision/kernels/Scaling.h), shared with the
// CUDA codec; the elements are rounded by FloatCodec.
void BlockScaledCodec::encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx) const {
  const int64_t len = blockLength(n);
  std::vector<float>& scaled = scratch(0, n);
  for (int64_t b = 0, begin = 0; begin < n; ++b, begin += len) {
    const int64_t m = std::min(len, n - begin);
    uint32_t amaxBits = 0;  // integer max: inf or NaN anywhere makes it non-finite
    for (int64_t i = 0; i < m; ++i) amaxBits = std::max(amaxBits, kernels::absBits(in[begin + i]));
    const uint32_t code = kernels::blockScaleCode(amaxBits, emax_);
    out[b] = static_cast<uint8_t>(code);
    for (int64_t i = 0; i < m; ++i)
      scaled[static_cast<size_t>(begin + i)] = kernels::blockScaledInput(in[begin + i], code);
  }
  elements_.encode(scaled.data(), n, out + blocks(n), ctx);
}

void BlockScaledCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const int64_t len = blockLength(n);
  elements_.decode(in + blocks(n), n, out);
  for (int64_t b = 0, begin = 0; begin < n; ++b, begin += len) {
    const int64_t m = std::min(len, n - begin);
    for (int64_t i = begin; i < begin + m; ++i) out[i] = kernels::blockScaledOutput(out[i], in[b]);
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
