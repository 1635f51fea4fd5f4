#pragma once

#include "framework/core/EnumNames.h"

#include "precision/FloatFormat.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace aps::precision {

// In-place element-wise MAX over all ranks of values[0, n) (an all-reduce); implemented by
// the comm layer, so that precision does not depend on it.
using MaxReduce = std::function<void(float* values, int64_t n)>;

// One parameter tensor's gradient.
struct LayerGradient {
  const float* data = nullptr;
  int64_t size = 0;
};

enum class ScalingMode : uint8_t {
  None,    // no scaling
  Aps,     // one power-of-two shift per layer (Han et al. 2021)
  Global,  // one power-of-two shift for all layers
  Fp8Lm,   // the FP8-LM automatic scaler mu (Fp8LmScaler)
  Block,   // a power-of-two scale per block of each sender's values, in the codec (BlockScaledCodec)
};
inline constexpr EnumNames<ScalingMode, 5> kScalingModeNames{{"none", "aps", "global", "fp8lm", "block"}};
static_assert(kScalingModeNames.covers(ScalingMode::Block), "one name per ScalingMode");
// "none", "aps", "global", "fp8lm", "block", and "autoscale": fp8lm's documented alias;
// throws aps::Error naming the value.
ScalingMode parseScalingMode(const std::string& name);
const char* scalingModeName(ScalingMode mode);

// data[i] *= 2^shift with a single rounding (exact unless the result is an fp32
// subnormal or overflows), for any shift: computed in double, where 2^shift and the
// product are exact.
void scaleByPowerOfTwo(float* data, int64_t n, int shift);
void scaleByPowerOfTwo(const float* in, float* out, int64_t n, int shift);

// The largest kernels::absBits of x (n values): an integer max, so NaN > inf > any finite
// magnitude (above 0x7f800000 - 1: an inf or a NaN among them). The block codecs' absmax.
uint32_t maxAbsBits(const float* x, int64_t n);

// dst = src (n values) and the largest kernels::absBits of them: the copy that measures what
// APS's exponent needs on the way (above 0x7f800000 - 1: an inf or a NaN among them).
uint32_t copyMaxAbsBits(float* dst, const float* src, int64_t n);
// The same with dst = 0 + src (-0 becomes +0, a signalling NaN quiet), measured after the add:
// what a gradient written over a zeroed buffer (0 + g) would give copyMaxAbsBits.
uint32_t copyPlusZeroMaxAbsBits(float* dst, const float* src, int64_t n);

// Sticky 16-bit keys: a value's top 16 fp32 bits (sign, exponent, 7 mantissa bits) with the
// lowest one OR-ed with the 16 bits dropped. Widened back (the key in the top half, zeros
// below) a key is an fp32 that nearest rounding to a format of at most 5 mantissa bits rounds
// to the same value as the original, after any power-of-two scaling: the format's last bit
// (23 - M >= 18) and its round bit (>= 17) are kept, and all below them is in the sticky bit;
// at the format's subnormals the rounding point only moves up; NaN stays NaN and keeps its
// sign, infinity stays infinity (Codec::roundsSticky16Exactly says which codecs qualify). The
// simulator keeps its ranks' gradient copies this way for such a wire format with APS: half
// the bytes written in backward and read by the reduction.
// A nonzero fp32 subnormal keeps fewer significant bits in its key, enough only at shifts
// that still take it below half the format's smallest subnormal: the copier keeps such values
// whole as well (*fp32Subnormals says whether src holds one).
// dst[i] = key(0 + src[i]) (-0 keys as +0); returns the largest kernels::absBits of src (the
// full values).
uint32_t copyMaxAbsBitsSticky16(uint16_t* dst, const float* src, int64_t n, bool* fp32Subnormals);
// dst[i] = the fp32 whose top half is src[i] and bottom half zero.
void widenSticky16(const uint16_t* src, float* dst, int64_t n);

// Auto Precision Scaling (Han, Demmel, You; arXiv 1911.08907; docs/ALGORITHMS.md, APS).
// Per layer l: e_l = ceil(log2(N * max|g_l|)) on every rank, an all-reduce MAX of the
// vector e, and the shift s_l = emax - e_l, emax the exponent of the format's largest
// finite value. Then N * max|g_l * 2^s_l| <= 2^emax <= max finite, so no partial sum of the
// N scaled, quantized gradients can overflow (2^emax / N is a power of two, and rounding
// is monotone, so quantized values stay below it too).
class ApsScaler {
 public:
  // Exponent sent for an all-zero layer: below any real one, so MAX ignores it.
  static constexpr float kZeroExponent = -1.0e9f;  // kernels::kApsZeroExponent

  struct Shifts {
    std::vector<int> shift;       // per layer: multiply by 2^shift before quantizing
    std::vector<bool> nonFinite;  // per layer: some rank's gradient had inf/NaN (shift 0)
    bool anyNonFinite = false;
  };

  ApsScaler(const FloatFormat& format, int worldSize, ScalingMode mode);

  // e_l for this rank's layers (kZeroExponent for all-zero layers, +inf when non-finite).
  std::vector<float> localExponents(const std::vector<LayerGradient>& layers) const;
  // The same from each layer's largest kernels::absBits, measured elsewhere (copyMaxAbsBits).
  std::vector<float> exponentsOfMaxBits(std::span<const uint32_t> maxBits) const;
  // The shifts shared by every rank: one reduceMax call of one value per layer (Aps) or
  // of one value (Global); no call for None. A layer zero on every rank gets shift 0.
  Shifts shifts(const std::vector<LayerGradient>& layers, const MaxReduce& reduceMax) const;
  // The same from this rank's exponents (localExponents or exponentsOfMaxBits).
  Shifts shiftsOfExponents(std::vector<float> exponents, const MaxReduce& reduceMax) const;

  // log2 of (the largest magnitude a layer's scaled gradient can reach, 2^emax / N) over (the
  // format's smallest positive value): the binades the scaled values have before they flush to
  // zero. The headroom for N summands costs log2(N) of the format's range; below 1 even a
  // layer's largest value lands under twice the smallest positive value, so (nearly) every value
  // is flushed. E3M0 at N = 64: 2^3 / 64 = 0.125, half of its smallest value 0.25 -> -1.
  double usableBinades() const;
  // The most ranks at which APS with `format` leaves its largest values one usable binade
  // (usableBinades() >= 1): beyond it the model stops learning. E3M0: 16; E2M1: 4.
  static double maxRanks(const FloatFormat& format);

  int maxExponent() const { return emax_; }
  ScalingMode mode() const { return mode_; }
  int worldSize() const { return worldSize_; }

 private:
  FloatFormat format_;
  int worldSize_;
  ScalingMode mode_;
  int emax_;
};

}  // namespace aps::precision
