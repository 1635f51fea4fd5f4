#pragma once

// The CUDA wire codecs (docs/ARCHITECTURE.md, One arithmetic for CPU and GPU): launches on
// device pointers of the codecs FloatCodec, BlockScaledCodec and DettmersCodec implement on the
// CPU, with the same wire bytes. Every per-element and per-block computation is a shared
// function of precision/kernels/*.h, the one the CPU codec calls. A plain C++ header: no
// cuda_runtime.h needed to include it; a stream is a cudaStream_t passed as void*.
//
// DeviceCodec (precision/cuda/DeviceCodec.h) builds the parameters from a CPU codec or a
// CodecSpec; these are the raw launches.

#include "framework/numerics/ComputeFormat.h"
#include "framework/numerics/FloatRounding.h"
#include "framework/numerics/RoundingMode.h"
#include "precision/Codec.h"
#include "precision/kernels/Quantization.h"

#include <cstddef>
#include <cstdint>

namespace aps::precision::cuda {

// Everything a codec kernel needs, passed to it by value (so no host pointers inside).
struct DeviceCodecParams {
  enum class Kind : int32_t { Float, BlockScaled, Dettmers };
  Kind kind = Kind::Float;
  // Float, and BlockScaled's element format.
  kernels::RoundingParams rounding{};
  kernels::CodeDecodeParams decode{};
  RoundingMode mode = RoundingMode::NearestEven;
  int32_t width = 1;      // bytes per value: 0 (two values per byte), 1, 2, or 4 (fp32 bits of the rounded value)
  int32_t emax = 0;       // BlockScaled: exponent of the element format's largest finite value
  int64_t blockSize = 0;  // BlockScaled, Dettmers: values per scale (0: one for the whole call)
  // Dettmers: the code book, the midpoints between neighbouring codes, the largest code used.
  uint32_t dettmersTop = 255;
  float codeBook[256] = {};
  float midpoints[256] = {};
};

// Bytes n values occupy on the wire (the CPU codec's encodedBytes).
size_t encodedBytes(const DeviceCodecParams& params, int64_t n);

// The Codec operations on device pointers, queued on `stream` (nullptr: the default stream)
// and asynchronous like any kernel launch. Stochastic rounding draws element i's bits from
// randomBits32(ctx.seed, ctx.stream, ctx.offset + i), as the CPU codec does, so device and
// CPU bytes are equal. decodeAddEncode allows out to alias a or b. Block codecs take scratch
// memory from the stream-ordered allocator. Without a CUDA build these throw aps::Error.
void encode(const DeviceCodecParams& params, const float* in, int64_t n, uint8_t* out, const EncodeContext& ctx,
            void* stream);
void decode(const DeviceCodecParams& params, const uint8_t* in, int64_t n, float* out, void* stream);
void decodeAdd(const DeviceCodecParams& params, const uint8_t* in, int64_t n, float* acc, void* stream);
void decodeAddEncode(const DeviceCodecParams& params, const uint8_t* a, const uint8_t* b, int64_t n, uint8_t* out,
                     const EncodeContext& ctx, void* stream);

// APS's reduction: *out (a device uint32) = the largest |data[i]| as fp32 bits, unsigned
// (non-finite, > 0x7f7fffff, when data holds inf or NaN; 0 for n == 0).
// kernels::apsExponent(*out, worldSize) is then the layer's exponent ApsScaler sends.
void absMaxBits(const float* data, int64_t n, uint32_t* out, void* stream);

// The loss scaler's unscale of one device gradient (precision/DynamicLossScaler.h), the CPU's
// steps in its order: g *= inverse; a non-finite product sets *nonFinite (a device uint32) to
// 1; then g is rounded to `format` (Fp32: not rounded). *nonFinite is never cleared here.
void unscaleGradient(float* data, int64_t n, float inverse, ComputeFormat format, uint32_t* nonFinite, void* stream);

// APS's scaling of a layer before the all-reduce (comm::InputShift): data[i] *= 2^shift, as
// kernels::scaleByPow2 (and precision::scaleByPowerOfTwo on the CPU) rounds it.
void scaleByPowerOfTwo(float* data, int64_t n, int shift, void* stream);

// The data-parallel mean of a reduced gradient (comm::reduceBucket): data[i] /= divisor, a
// division as on the CPU (not a product with the reciprocal, which rounds differently).
void divideBy(float* data, int64_t n, float divisor, void* stream);

// The gradient hooks' arithmetic on a GPU (comm/BucketHooks.h), element by element the shared
// functions of precision/kernels/Quantization.h that the CPU calls.

// Error feedback's compensation (precision::ErrorFeedback::compensate): acc[i] += x[i].
void addInto(float* acc, const float* x, int64_t n, void* stream);

// FP8-LM's scaling (comm::Fp8LmHook): data[i] *= factor, a float product as on the CPU.
void multiplyBy(float* data, int64_t n, float factor, void* stream);

// *count (a device uint64, not cleared here) += the values with !(|x| < limit): FP8-LM's
// saturated values (NaN counts); with limit = inf, the values that are inf or NaN.
void countNotBelow(const float* data, int64_t n, float limit, unsigned long long* count, void* stream);

// Error feedback's residual (precision::ErrorFeedback::update) of n intended values, each
// quantized as Quantizer::quantize rounds it with `mode` (random bits from ctx, as the codecs
// draw them): kernels::feedbackResidual(intended, quantized, shift, scale) into residual.
void feedbackResidual(const kernels::RoundingParams& rounding, RoundingMode mode, const float* intended, int64_t n,
                      const EncodeContext& ctx, int shift, float scale, float* residual, void* stream);

// What quantizing x[i] * 2^shift (n values, rounded as feedbackResidual rounds) does, in a
// format whose largest finite value is maxValue; with `quantized` set, what x[i] became as
// quantized[i] (shift 0, nothing rounded here). out[c] = chunk c's kernels::CountsPartial
// (chunks of kernels::kCountsChunk values), for the host to add in chunk order as
// precision::QuantizationCounts::measure does.
void quantizationCounts(const kernels::RoundingParams& rounding, RoundingMode mode, const float* x,
                        const float* quantized, int64_t n, int shift, const EncodeContext& ctx, float maxValue,
                        kernels::CountsPartial* out, void* stream);

// The fidelity probe's comparison of n values of a low-precision sum with the exact one:
// out[c] = chunk c's kernels::CompareSums (chunks of kernels::kCountsChunk), for the host to add
// in chunk order.
void compareSums(const float* lp, const float* exact, int64_t n, kernels::CompareSums* out, void* stream);

}  // namespace aps::precision::cuda
