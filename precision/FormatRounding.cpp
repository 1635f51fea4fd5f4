#include "precision/FormatRounding.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "precision/FloatCodec.h"
#include "precision/Quantizer.h"
#include "precision/cuda/DeviceCodec.h"
#include "precision/kernels/FloatRounding.h"

#include <bit>
#include <cmath>
#include <limits>

namespace aps::precision {

namespace {
constexpr int64_t kGrain = 1 << 15;

// The roundings themselves are shared with the CUDA kernels (precision/kernels/FloatRounding.h).
using kernels::roundBf16;
using kernels::roundFp16;

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

namespace {
// A cuda tensor's rounding runs on the device (precision/cuda/CodecKernels.h) with the same
// per-element functions; a view is rounded through a contiguous copy.
template <class RoundContiguous>
void roundTensor(Tensor& t, ComputeFormat format, const char* what, RoundContiguous&& round) {
  if (format == ComputeFormat::Fp32 || !t.defined()) return;
  APS_CHECK(t.dtype() == DType::Float32, "{}: tensor of shape {} is {}, not float32", what, t.shapeString(),
            dtypeName(t.dtype()));
  if (t.isContiguous()) {
    round(t);
    return;
  }
  Tensor c = t.contiguous();
  round(c);
  t.copyFrom(c);
}

// The wire codec's stochastic rounding to fp16/bf16 on the device: a FloatCodec whose encoded
// value is the rounded fp32 (width 4), encoded in place.
cuda::DeviceCodecParams stochasticDeviceParams(ComputeFormat format) {
  const FloatCodec codec(sixteenBitQuantizer(format).format(), RoundingMode::Stochastic);
  cuda::DeviceCodecParams p = cuda::DeviceCodec(codec).params();
  p.width = 4;
  return p;
}
}  // namespace

void roundInPlace(Tensor& t, ComputeFormat format) {
  roundTensor(t, format, "roundInPlace", [format](Tensor& c) {
    if (c.device().isCpu()) {
      roundNearestEven(c.data<float>(), c.numel(), format);
    } else {
      cuda::roundToComputeFormat(c.data<float>(), c.numel(), format, nullptr);
    }
  });
}

void roundStochasticInPlace(Tensor& t, ComputeFormat format, uint64_t seed, uint64_t stream) {
  roundTensor(t, format, "roundStochasticInPlace", [format, seed, stream](Tensor& c) {
    if (c.device().isCpu()) {
      roundStochastic(c.data<float>(), c.numel(), format, seed, stream);
      return;
    }
    static const cuda::DeviceCodecParams fp16 = stochasticDeviceParams(ComputeFormat::Fp16);
    static const cuda::DeviceCodecParams bf16 = stochasticDeviceParams(ComputeFormat::BFloat16);
    float* data = c.data<float>();
    cuda::encode(format == ComputeFormat::Fp16 ? fp16 : bf16, data, c.numel(), reinterpret_cast<uint8_t*>(data),
                 {seed, stream, 0}, nullptr);
  });
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
