#pragma once

#include "precision/Codec.h"
#include "precision/FloatFormat.h"
#include "framework/numerics/RoundingMode.h"
#include "framework/numerics/FloatRounding.h"

#include <cstdint>

namespace aps::precision {

// Rounds fp32 values to a FloatFormat, exactly, with integer bit manipulation (no libm) in
// loops without per-value branches so the compiler vectorises them (AVX2 variable shifts).
// The one floating-point step, the AVX-512 nearest-rounding codes' count of quanta below the
// smallest normal, is an exact multiply by a power of two taken only where FTZ/DAZ modes
// cannot change its result, so no mode changes a code.
// Conversion rounds first (to the format's grid, with unbounded exponent range above), then
// applies the overflow policy (docs/ALGORITHMS.md, Overflow policy). NaN stays NaN where the format has one.
// Stochastic rounding draws element i's bits from randomBits32(ctx.seed, ctx.stream,
// ctx.offset + i) (framework/core/Rng.h), so results do not depend on chunking.
class Quantizer {
 public:
  explicit Quantizer(const FloatFormat& format);

  const FloatFormat& format() const { return format_; }

  // out[i] = Q(in[i]) as a float; out may alias in.
  void quantize(const float* in, float* out, int64_t n, RoundingMode mode, const EncodeContext& ctx = {}) const;
  // Codes (sign << (E+M) | exponent << M | mantissa) of Q(in[i]); formats of <= 8 bits.
  void encode(const float* in, uint8_t* out, int64_t n, RoundingMode mode, const EncodeContext& ctx = {}) const;
  // Codes of formats of <= 16 bits.
  void encode(const float* in, uint16_t* out, int64_t n, RoundingMode mode, const EncodeContext& ctx = {}) const;
  // Codes of formats of <= 4 bits, two per byte: element 2i in the low nibble (an odd n leaves
  // the last byte's high nibble 0).
  void encodeNibbles(const float* in, uint8_t* out, int64_t n, RoundingMode mode, const EncodeContext& ctx = {}) const;

  // Scalar forms; `randomBits` is only used by stochastic rounding (P(up) = frac / 2^32).
  float quantize(float x, RoundingMode mode = RoundingMode::NearestEven, uint32_t randomBits = 0) const;
  uint32_t encode(float x, RoundingMode mode = RoundingMode::NearestEven, uint32_t randomBits = 0) const;

  // Everything the branch-free kernel needs, precomputed from the format
  // (framework/numerics/FloatRounding.h, where the scalar rounding core lives).
  using Params = kernels::RoundingParams;
  const Params& params() const { return params_; }

 private:
  FloatFormat format_;
  Params params_;
};

// out[i] = randomBits32(seed, stream, first + i) (framework/core/Philox.h), a Philox block per
// four elements (32 blocks at a time with AVX-512).
void randomBitsBlock(uint32_t* out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first);

// How the codes of `format` decode (kernels::decodeCode). bf16's layout reads the code as the
// top half of the fp32 bits; with f16cNans, fp16's reads NaN codes as the x86 F16C conversion
// does (payload kept), which is what FloatCodec's F16C decoder gives; otherwise every code
// decodes as FloatFormat::decode.
kernels::CodeDecodeParams codeDecodeParams(const FloatFormat& format, bool f16cNans);

// Compute-precision emulation (fp16/bf16 training): data[i] = Q(data[i]) in place.
void roundToFormat(float* data, int64_t n, const FloatFormat& format, RoundingMode mode, const EncodeContext& ctx = {});

}  // namespace aps::precision
