#include "precision/FormatRounding.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "precision/Quantizer.h"

#include <bit>
#include <cmath>
#include <limits>

namespace aps::precision {

namespace {
constexpr int64_t kGrain = 1 << 15;

// binary16 nearest-even: adding and subtracting 2^23 times the grid step makes the FPU round
// |x| to a multiple of that step (the sum lies in a binade whose float32 spacing is exactly
// the step, and the subtraction is exact). The step is 2^(e - 10) for normal halves and
// 2^-24 below 2^-14 (subnormals). |x| >= 65520 rounds past 65504 to inf (IEEE 754).
inline float roundFp16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  const uint32_t exponent = magnitude >> 23;
  const uint32_t stepExponent = (exponent > 113u ? exponent : 113u) - 10u;  // biased; 113 = 2^-14
  const float magic = std::bit_cast<float>(((stepExponent + 23u) & 0xFFu) << 23);
  const float v = std::bit_cast<float>(magnitude);
  uint32_t rounded = std::bit_cast<uint32_t>((v + magic) - magic);
  rounded = magnitude >= 0x477FF000u ? 0x7F800000u : rounded;  // 65520 and above (inf too)
  rounded = magnitude > 0x7F800000u ? 0x7FC00000u : rounded;   // NaN: canonical quiet NaN
  return std::bit_cast<float>(sign | rounded);
}

// bfloat16 nearest-even on the bits: add half an ulp minus one plus the kept lsb, truncate.
inline float roundBf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t lsb = (bits >> 16) & 1u;
  uint32_t rounded = (bits + 0x7FFFu + lsb) & 0xFFFF0000u;
  rounded = (bits & 0x7FFFFFFFu) > 0x7F800000u ? ((bits | 0x00400000u) & 0xFFFF0000u) : rounded;  // NaN stays quiet
  return std::bit_cast<float>(rounded);
}

// A plain loop over inlined branch-free code, in a function of its own and marked simd:
// inlined into parallelFor's single-chunk path GCC 12 otherwise emits a scalar loop.
template <float (*kRound)(float)>
[[gnu::noinline]] void roundRange(float* data, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) data[i] = kRound(data[i]);
}

template <float (*kRound)(float)>
void roundAll(float* data, int64_t n) {
  parallelFor(n, kGrain, [data](int64_t begin, int64_t end) { roundRange<kRound>(data, begin, end); });
}
}  // namespace

const char* computeFormatName(ComputeFormat format) { return kComputeFormatNames.name(format).data(); }

float roundNearestEven(float x, ComputeFormat format) {
  switch (format) {
    case ComputeFormat::Fp16:
      return roundFp16(x);
    case ComputeFormat::BFloat16:
      return roundBf16(x);
    case ComputeFormat::Fp32:
      break;
  }
  return x;
}

void roundNearestEven(float* data, int64_t n, ComputeFormat format) {
  if (format == ComputeFormat::Fp16) roundAll<roundFp16>(data, n);
  if (format == ComputeFormat::BFloat16) roundAll<roundBf16>(data, n);
}

// Stochastic rounding is the wire codec's (Quantizer): one routine, so a weight rounded for
// 16-bit storage and a gradient rounded for the wire take the same draw to the same bits.
namespace {
const Quantizer& sixteenBitQuantizer(ComputeFormat format) {
  static const Quantizer fp16(FloatFormat::preset("fp16"));
  static const Quantizer bf16(FloatFormat::preset("bf16"));
  return format == ComputeFormat::Fp16 ? fp16 : bf16;
}
}  // namespace

float roundStochastic(float x, ComputeFormat format, uint32_t randomBits) {
  if (format == ComputeFormat::Fp32) return x;
  return sixteenBitQuantizer(format).quantize(x, RoundingMode::Stochastic, randomBits);
}

void roundStochastic(float* data, int64_t n, ComputeFormat format, uint64_t seed, uint64_t stream) {
  if (format == ComputeFormat::Fp32) return;
  roundToFormat(data, n, sixteenBitQuantizer(format).format(), RoundingMode::Stochastic, {seed, stream, 0});
}

void roundInPlace(Tensor& t, ComputeFormat format) {
  if (format == ComputeFormat::Fp32 || !t.defined()) return;
  APS_CHECK(t.dtype() == DType::Float32, "roundInPlace: tensor of shape {} is {}, not float32", t.shapeString(),
            dtypeName(t.dtype()));
  if (t.isContiguous()) {
    roundNearestEven(t.data<float>(), t.numel(), format);
    return;
  }
  Tensor c = t.contiguous();
  roundNearestEven(c.data<float>(), c.numel(), format);
  t.copyFrom(c);
}

bool isRepresentable(float x, ComputeFormat format) {
  return std::isnan(x) || std::bit_cast<uint32_t>(roundNearestEven(x, format)) == std::bit_cast<uint32_t>(x);
}

int64_t countNotRepresentable(const Tensor& t, ComputeFormat format) {
  int64_t count = 0;
  for (float v : t.toFloatVector()) count += isRepresentable(v, format) ? 0 : 1;
  return count;
}

}  // namespace aps::precision
