#pragma once

// The per-element arithmetic of what the gradient hooks measure and keep about quantizing a
// gradient, shared by the CPU (precision::QuantizationCounts, precision::ErrorFeedback) and the
// device kernels (precision/cuda/CodecKernels.h), so a hook on a GPU keeps the CPU's bits.

#include "framework/core/HostDevice.h"
#include "framework/core/Philox.h"
#include "framework/numerics/FloatRounding.h"
#include "framework/numerics/RoundingMode.h"
#include "precision/kernels/Scaling.h"

#include <cstdint>

namespace aps::precision::kernels {

// Value i of a call quantized in a float format, as Quantizer::quantize rounds it (stochastic
// rounding draws randomBits32(seed, stream, offset + i), the codecs' bits).
APS_HOST_DEVICE inline float quantizedValue(float x, int64_t i, RoundingMode mode, const RoundingParams& p,
                                            uint64_t seed, uint64_t stream, int64_t offset) {
  const uint32_t bits =
      mode == RoundingMode::Stochastic ? randomBits32(seed, stream, static_cast<uint64_t>(offset + i)) : 0u;
  return roundValue(x, mode, bits, p);
}

// Error feedback's residual of one value (precision::ErrorFeedback::update): intended - sent,
// 0 where that is not finite (it would poison every later step), brought back to gradient
// units: an exact 2^-shift, then a division by `scale` unless it is 1.
APS_HOST_DEVICE inline float feedbackResidual(float intended, float sent, int32_t shift, float scale) {
  const float e = intended - sent;
  float r = absBits(e) < 0x7f800000u ? e : 0.0f;
  r = scaleByPow2(r, -shift);
  return scale != 1.0f ? r / scale : r;
}

// What quantizing a run of values did (precision::QuantizationCounts): counts, and sums of
// squares in double. Values are counted in chunks of kCountsChunk from the start of a call,
// each chunk's sums in value order, then the chunks' in chunk order: a GPU sums each chunk on a
// thread of its own and the host the chunks, in the CPU's order.
inline constexpr int64_t kCountsChunk = 1024;

struct CountsPartial {
  int64_t total = 0;
  int64_t nonzero = 0;
  int64_t flushed = 0;
  int64_t saturated = 0;
  double errorSquared = 0.0;
  double inputSquared = 0.0;
};

// x quantized to q, in a format whose largest finite value is maxValue.
APS_HOST_DEVICE inline void countValue(CountsPartial& c, float x, float q, float maxValue) {
  const bool finiteIn = absBits(x) < 0x7f800000u;
  c.total += 1;
  c.nonzero += x != 0.0f;
  c.flushed += x != 0.0f && q == 0.0f;
  c.saturated += finiteIn && !(bitCast<float>(absBits(q)) < maxValue);
  if (finiteIn && absBits(q) < 0x7f800000u) {
    const double d = static_cast<double>(x) - static_cast<double>(q);
    c.errorSquared += d * d;
    c.inputSquared += static_cast<double>(x) * static_cast<double>(x);
  }
}

// How countChunk reads a call's values: each scaled by 2^shift and quantized as quantizedValue
// rounds it, in a format whose largest finite value is maxValue (or, where the call gives
// what they were quantized to, those).
struct CountSpec {
  RoundingParams rounding{};
  RoundingMode mode = RoundingMode::NearestEven;
  uint64_t seed = 0, stream = 0;
  int64_t offset = 0;
  int32_t shift = 0;
  float maxValue = 0.0f;
};

// Chunk c (values [c * kCountsChunk, ...) of n) of a call: x[i] quantized, or (quantized set)
// x[i] as quantized[i].
APS_HOST_DEVICE inline CountsPartial countChunk(const CountSpec& s, const float* x, const float* quantized, int64_t n,
                                                int64_t c) {
  CountsPartial p;
  const int64_t end = n < (c + 1) * kCountsChunk ? n : (c + 1) * kCountsChunk;
  for (int64_t i = c * kCountsChunk; i < end; ++i) {
    if (quantized != nullptr) {
      countValue(p, x[i], quantized[i], s.maxValue);
      continue;
    }
    const float v = scaleByPow2(x[i], s.shift);
    countValue(p, v, quantizedValue(v, i, s.mode, s.rounding, s.seed, s.stream, s.offset), s.maxValue);
  }
  return p;
}

// The chunks of n values.
APS_HOST_DEVICE inline int64_t chunksOf(int64_t n) { return (n + kCountsChunk - 1) / kCountsChunk; }

// The fidelity probe's sums of a layer (comm::FidelityProbe): of the low-precision sum `lp`
// and the exact one, in double, over chunks of kCountsChunk values as countValue's.
struct CompareSums {
  double diff2 = 0.0;  // sum (lp - exact)^2
  double exact2 = 0.0;
  double lp2 = 0.0;
  double dot = 0.0;  // sum lp * exact
};

APS_HOST_DEVICE inline void compareValue(CompareSums& c, float lp, float exact) {
  const double a = lp, b = exact;
  c.diff2 += (a - b) * (a - b);
  c.exact2 += b * b;
  c.lp2 += a * a;
  c.dot += a * b;
}

// Chunk c of n values of a call.
APS_HOST_DEVICE inline CompareSums compareChunk(const float* lp, const float* exact, int64_t n, int64_t c) {
  CompareSums sums;
  const int64_t end = n < (c + 1) * kCountsChunk ? n : (c + 1) * kCountsChunk;
  for (int64_t i = c * kCountsChunk; i < end; ++i) compareValue(sums, lp[i], exact[i]);
  return sums;
}

APS_HOST_DEVICE inline void addSums(CompareSums& into, const CompareSums& chunk) {
  into.diff2 += chunk.diff2;
  into.exact2 += chunk.exact2;
  into.lp2 += chunk.lp2;
  into.dot += chunk.dot;
}

}  // namespace aps::precision::kernels
