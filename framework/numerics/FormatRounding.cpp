#include "framework/numerics/FormatRounding.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/core/Philox.h"
#include "framework/numerics/FloatRounding.h"
#include "framework/numerics/cuda/RoundingKernels.h"

#include <bit>
#include <cmath>
#include <limits>

namespace aps::precision {

namespace {
constexpr int64_t kGrain = 1 << 15;

// The roundings themselves are shared with the CUDA kernels (framework/numerics/FloatRounding.h).
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

// Stochastic rounding is the wire codecs' core (kernels::roundOne with the fp16 or bf16
// parameters, and element i's bits randomBits32(seed, stream, i)): a weight rounded for 16-bit
// storage and a gradient rounded for the wire take the same draw to the same bits
// (tests/precision/RoundingAgreementTest.cpp checks the parameters against Quantizer's).
float roundStochastic(float x, ComputeFormat format, uint32_t randomBits) {
  if (format == ComputeFormat::Fp32) return x;
  return kernels::roundValue(x, RoundingMode::Stochastic, randomBits, kernels::sixteenBitParams(format));
}

namespace {
// Elements [4 b0, 4 b1) of data, whole Philox blocks, in a plain loop the compiler can
// vectorise across blocks (the Philox rounds are 32 x 32 -> 64-bit products).
[[gnu::noinline]] void roundStochasticBlocks(float* data, int64_t b0, int64_t b1, const kernels::RoundingParams& p,
                                             uint64_t seed, uint64_t stream) {
#pragma omp simd
  for (int64_t b = b0; b < b1; ++b) {
    uint32_t bits[4];
    philox4x32(seed, stream, static_cast<uint64_t>(b), bits);
    for (int k = 0; k < 4; ++k) {
      float value = 0.0f;
      uint32_t code = 0;
      kernels::roundOne<RoundingMode::Stochastic, true, false>(data[4 * b + k], bits[k], p, value, code);
      data[4 * b + k] = value;
    }
  }
}
}  // namespace

void roundStochastic(float* data, int64_t n, ComputeFormat format, uint64_t seed, uint64_t stream) {
  if (format == ComputeFormat::Fp32) return;
  const kernels::RoundingParams params = kernels::sixteenBitParams(format);
  // Blocks of four elements share one Philox block (randomBits32's layout), so the split over
  // threads (at multiples of four) cannot change a draw.
  const int64_t whole = n / 4;
  parallelFor(whole, int64_t{1} << 12, [&](int64_t begin, int64_t end) {
    roundStochasticBlocks(data, begin, end, params, seed, stream);
  });
  for (int64_t i = 4 * whole; i < n; ++i) data[i] = roundStochastic(data[i], format, randomBits32(seed, stream, i));
}

namespace {
// A cuda tensor's rounding runs on the device (framework/numerics/cuda/RoundingKernels.h) with
// the same per-element functions; a view is rounded through a contiguous copy.
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
    } else {
      cuda::roundStochasticToComputeFormat(c.data<float>(), c.numel(), format, seed, stream, nullptr);
    }
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
