#include "precision/BlockScaledCodec.h"

#include "framework/core/Error.h"
#include "precision/ApsScaler.h"
#include "precision/kernels/Scaling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace aps::precision {

namespace {

FloatFormat saturating(FloatFormat f) {
  f.overflow = Overflow::Saturate;
  return f;
}

// Values per encode or decode step: whole blocks whose scaled values stay in L1 between the
// scaling and the element codec.
constexpr int64_t kStep = 2048;

// Scratch for the scaled values of one call (codecs are shared by threads: one per thread).
std::vector<float>& scratch(int which, int64_t n) {
  thread_local std::vector<float> buffers[2];
  auto& b = buffers[which];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b;
}

// Values per step for blocks of `len`: a multiple of len, even (nibble elements start on a byte).
int64_t stepLength(int64_t len, int64_t n) {
  if (len > kStep) return n;
  const int64_t step = (kStep / len) * len;
  return step % 2 ? 2 * step : step;
}

// The block's largest magnitude as fp32 bits (integer max: inf or NaN makes it non-finite).
uint32_t amaxBits(const float* x, int64_t m) {
  uint32_t amax = 0;
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512i acc = _mm512_setzero_si512();
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  for (; i < m; i += 16) {
    const auto lanes = static_cast<__mmask16>(m - i >= 16 ? 0xffff : (1u << (m - i)) - 1);
    acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_maskz_loadu_epi32(lanes, x + i), magnitude));
  }
  amax = _mm512_reduce_max_epu32(acc);
#endif
  for (; i < m; ++i) amax = std::max(amax, kernels::absBits(x[i]));
  return amax;
}

// dst[i] = kernels::scaleByPow2(x[i], shift) for shift != 0. vscalefps gives x * 2^shift with
// one rounding (the exact product rounded to fp32, subnormals and overflow included) as the
// double multiply and conversion do; NaNs keep their payload, quieted, in both.
void scaleBlock(const float* x, int64_t m, int32_t shift, float* dst) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 exponent = _mm512_set1_ps(static_cast<float>(shift));
  for (; i < m; i += 16) {
    const auto lanes = static_cast<__mmask16>(m - i >= 16 ? 0xffff : (1u << (m - i)) - 1);
    _mm512_mask_storeu_ps(dst + i, lanes, _mm512_scalef_ps(_mm512_maskz_loadu_ps(lanes, x + i), exponent));
  }
#endif
  for (; i < m; ++i) dst[i] = kernels::scaleByPow2(x[i], shift);
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
// Elements [begin, begin + m) of an encoding of n values (begin a multiple of the block length
// and even): their scale bytes and element bytes, from values x[0, m). `scaled` holds m floats.
void BlockScaledCodec::encodeRange(const float* x, int64_t n, int64_t begin, int64_t m, uint8_t* out, float* scaled,
                                   const EncodeContext& ctx) const {
  const int64_t len = blockLength(n);
  for (int64_t first = 0; first < m; first += len) {
    const int64_t count = std::min(len, m - first);
    const uint32_t code = kernels::blockScaleCode(amaxBits(x + first, count), emax_);
    out[(begin + first) / len] = static_cast<uint8_t>(code);
    const int32_t shift = kernels::kScaleBias - static_cast<int32_t>(code);
    if (code == kernels::kNanScale) {
      std::fill(scaled + first, scaled + first + count, 0.0f);
    } else if (shift == 0) {
      std::memcpy(scaled + first, x + first, static_cast<size_t>(count) * sizeof(float));
    } else {
      scaleBlock(x + first, count, shift, scaled + first);
    }
  }
  EncodeContext local = ctx;
  local.offset = ctx.offset + begin;
  elements_.encode(scaled, m, out + blocks(n) + elements_.encodedBytes(begin), local);
}

// The decoded values [begin, begin + m) of an encoding of n values into out[0, m).
void BlockScaledCodec::decodeRange(const uint8_t* in, int64_t n, int64_t begin, int64_t m, float* out) const {
  const int64_t len = blockLength(n);
  elements_.decode(in + blocks(n) + elements_.encodedBytes(begin), m, out);
  for (int64_t first = 0; first < m; first += len) {
    const int64_t count = std::min(len, m - first);
    const uint32_t code = in[(begin + first) / len];
    const int32_t shift = static_cast<int32_t>(code) - kernels::kScaleBias;
    if (code == kernels::kNanScale) {
      std::fill(out + first, out + first + count, kernels::blockScaledOutput(0.0f, code));
    } else if (shift != 0) {
      scaleBlock(out + first, count, shift, out + first);
    }
  }
}

// All four work in steps of whole blocks (stepLength), so intermediate values stay in L1.
void BlockScaledCodec::encode(const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx) const {
  const int64_t step = stepLength(blockLength(n), n);
  float* scaled = scratch(0, std::min(step, n)).data();
  for (int64_t begin = 0; begin < n; begin += step) {
    encodeRange(in + begin, n, begin, std::min(step, n - begin), out, scaled, ctx);
  }
}

void BlockScaledCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const int64_t step = stepLength(blockLength(n), n);
  for (int64_t begin = 0; begin < n; begin += step) decodeRange(in, n, begin, std::min(step, n - begin), out + begin);
}

void BlockScaledCodec::decodeAdd(const uint8_t* in, int64_t n, float* acc) const {
  const int64_t step = stepLength(blockLength(n), n);
  float* values = scratch(0, std::min(step, n)).data();
  for (int64_t begin = 0; begin < n; begin += step) {
    const int64_t m = std::min(step, n - begin);
    decodeRange(in, n, begin, m, values);
    for (int64_t i = 0; i < m; ++i) acc[begin + i] += values[i];
  }
}

void BlockScaledCodec::decodeAddEncode(const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                                       const EncodeContext& ctx) const {
  // A step's bytes of a and b are read before the same step's bytes of out are written, so
  // out may alias a or b.
  const int64_t step = stepLength(blockLength(n), n);
  float* va = scratch(0, std::min(step, n)).data();
  float* vb = scratch(1, std::min(step, n)).data();
  for (int64_t begin = 0; begin < n; begin += step) {
    const int64_t m = std::min(step, n - begin);
    decodeRange(a, n, begin, m, va);
    decodeRange(b, n, begin, m, vb);
    for (int64_t i = 0; i < m; ++i) va[i] += vb[i];
    encodeRange(va, n, begin, m, out, vb, ctx);
  }
}

}  // namespace aps::precision
