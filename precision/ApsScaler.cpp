#include "precision/ApsScaler.h"

#include "framework/core/Error.h"
#include "precision/MaxLanes.h"
#include "precision/kernels/Scaling.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace aps::precision {

ScalingMode parseScalingMode(const std::string& name) {
  if (const auto mode = kScalingModeNames.find(name)) return *mode;
  if (name == "autoscale") return ScalingMode::Fp8Lm;  // the documented alias
  APS_FAIL("scaling = '{}' is unknown ({}, or autoscale for fp8lm)", name, kScalingModeNames.list());
}

const char* scalingModeName(ScalingMode mode) { return kScalingModeNames.name(mode).data(); }

void scaleByPowerOfTwo(const float* in, float* out, int64_t n, int shift) {
  if (shift == 0) {
    if (in != out) std::copy(in, in + n, out);
    return;
  }
  // kernels::scaleByPow2 with the factor taken out of the loop. Where 2^shift is a normal
  // float, a float product is the same number rounded once, as the double product is: the
  // same bits, twice the values per instruction (the simulator's two_shot scales each
  // sender's values in the cache as it encodes them, where this is arithmetic, not memory).
  if (shift >= -126 && shift <= 127) {
    const auto factor = static_cast<float>(kernels::pow2Double(shift));
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] * factor;
    return;
  }
  const double factor = kernels::pow2Double(shift);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<double>(in[i]) * factor);
}

void scaleByPowerOfTwo(float* data, int64_t n, int shift) { scaleByPowerOfTwo(data, data, n, shift); }

uint32_t maxAbsBits(const float* x, int64_t n) {
#if defined(__AVX512F__)
  return maxAbsBitsLanes(x, n);
#else
  uint32_t maxBits = 0;
  for (int64_t i = 0; i < n; ++i) maxBits = std::max(maxBits, kernels::absBits(x[i]));
  return maxBits;
#endif
}

uint32_t copyMaxAbsBits(float* dst, const float* src, int64_t n) {
  uint32_t maxBits = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = src[i];
    dst[i] = v;
    maxBits = std::max(maxBits, kernels::absBits(v));
  }
  return maxBits;
}

uint32_t copyPlusZeroMaxAbsBits(float* dst, const float* src, int64_t n) {
  uint32_t maxBits = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = 0.0f + src[i];
    dst[i] = v;
    maxBits = std::max(maxBits, kernels::absBits(v));
  }
  return maxBits;
}

uint32_t copyMaxAbsBitsSticky16(uint16_t* dst, const float* src, int64_t n, bool* fp32Subnormals) {
  uint32_t maxBits = 0, minNormalOrZero = 0x7fffffffu;
  int64_t i = 0;
#if defined(__AVX512F__)
  // The same, 16 values a step (the compiler does not vectorise the loop below).
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), low = _mm512_set1_epi32(0xffff);
  const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
  __m512i mx = zero, mn = magnitude;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(src + i);
    const __m512i a = _mm512_and_si512(u, magnitude);
    mx = _mm512_max_epu32(mx, a);
    const __mmask16 zeros = _mm512_cmpeq_epi32_mask(a, zero);
    mn = _mm512_min_epu32(mn, _mm512_mask_mov_epi32(a, zeros, magnitude));
    __m512i key = _mm512_maskz_srli_epi32(static_cast<__mmask16>(~zeros), u, 16);  // -0: the key of +0
    key = _mm512_mask_or_epi32(key, _mm512_test_epi32_mask(u, low), key, one);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(key));
  }
  // Through memory: GCC 12 reports its own _mm512_reduce_max_epu32 as reading an uninitialised value.
  alignas(64) uint32_t maxLanes[16], minLanes[16];
  _mm512_store_si512(maxLanes, mx);
  _mm512_store_si512(minLanes, mn);
  for (int k = 0; k < 16; ++k) {
    maxBits = std::max(maxBits, maxLanes[k]);
    minNormalOrZero = std::min(minNormalOrZero, minLanes[k]);
  }
#endif
  for (; i < n; ++i) {
    const auto u = std::bit_cast<uint32_t>(src[i]);
    const uint32_t a = u & 0x7fffffffu;
    dst[i] = a == 0 ? uint16_t{0} : static_cast<uint16_t>((u >> 16) | ((u & 0xffffu) != 0 ? 1u : 0u));
    maxBits = std::max(maxBits, a);
    // The smallest magnitude that is not zero (zero counts as the largest here).
    minNormalOrZero = std::min(minNormalOrZero, a == 0 ? 0x7fffffffu : a);
  }
  *fp32Subnormals = minNormalOrZero < 0x00800000u;
  return maxBits;
}

void widenSticky16(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
}

ApsScaler::ApsScaler(const FloatFormat& format, int worldSize, ScalingMode mode)
    : format_(format), worldSize_(worldSize), mode_(mode) {
  format_.validate();
  APS_CHECK(worldSize >= 1, "aps: world size {} must be >= 1", worldSize);
  APS_CHECK(mode != ScalingMode::Fp8Lm, "aps: scaling = fp8lm is Fp8LmScaler's, not ApsScaler's");
  APS_CHECK(mode != ScalingMode::Block, "aps: scaling = block lives in the codec (BlockScaledCodec), not ApsScaler");
  emax_ = format_.maxExponent();
}

double ApsScaler::usableBinades() const {
  return static_cast<double>(emax_) - std::log2(static_cast<double>(worldSize_)) -
         std::log2(static_cast<double>(format_.minSubnormal()));
}

double ApsScaler::maxRanks(const FloatFormat& format) {
  return std::exp2(ApsScaler(format, 1, ScalingMode::Aps).usableBinades() - 1.0);
}

std::vector<float> ApsScaler::localExponents(const std::vector<LayerGradient>& layers) const {
  std::vector<float> e(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    // The layer's largest |g| as an integer max of bits (non-finite when it holds inf or NaN),
    // then the exponent by the arithmetic the CUDA reduction shares (kernels::apsExponent).
    uint32_t maxBits = 0;
    for (int64_t i = 0; i < layers[l].size; ++i) maxBits = std::max(maxBits, kernels::absBits(layers[l].data[i]));
    e[l] = kernels::apsExponent(maxBits, worldSize_);
  }
  return e;
}

std::vector<float> ApsScaler::exponentsOfMaxBits(std::span<const uint32_t> maxBits) const {
  std::vector<float> e(maxBits.size());
  for (size_t l = 0; l < maxBits.size(); ++l) e[l] = kernels::apsExponent(maxBits[l], worldSize_);
  return e;
}

ApsScaler::Shifts ApsScaler::shifts(const std::vector<LayerGradient>& layers, const MaxReduce& reduceMax) const {
  if (mode_ == ScalingMode::None || layers.empty()) return shiftsOfExponents(std::vector<float>(layers.size()), {});
  return shiftsOfExponents(localExponents(layers), reduceMax);
}

ApsScaler::Shifts ApsScaler::shiftsOfExponents(std::vector<float> e, const MaxReduce& reduceMax) const {
  Shifts out;
  out.shift.assign(e.size(), 0);
  out.nonFinite.assign(e.size(), false);
  if (mode_ == ScalingMode::None || e.empty()) return out;
  if (mode_ == ScalingMode::Global) {
    // Global: one exponent for all layers (the max), so one shift. A non-finite layer makes
    // every layer's shift 0; the caller sees anyNonFinite.
    float g = *std::max_element(e.begin(), e.end());
    if (reduceMax) reduceMax(&g, 1);
    std::fill(e.begin(), e.end(), g);
  } else if (reduceMax) {
    reduceMax(e.data(), static_cast<int64_t>(e.size()));
  }
  for (size_t l = 0; l < e.size(); ++l) {
    if (std::isinf(e[l]) && e[l] > 0) {
      out.nonFinite[l] = true;
      out.anyNonFinite = true;
    } else if (e[l] > kZeroExponent) {
      out.shift[l] = emax_ - static_cast<int>(e[l]);
    }
  }
  return out;
}

}  // namespace aps::precision
