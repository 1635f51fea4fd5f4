#include "precision/ApsScaler.h"

#include "framework/core/Error.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace aps::precision {

ScalingMode parseScalingMode(const std::string& name) {
  if (const auto mode = kScalingModeNames.find(name)) return *mode;
  if (name == "autoscale" || name == "auto") return ScalingMode::Fp8Lm;
  APS_FAIL("scaling = '{}' is unknown ({})", name, kScalingModeNames.list());
}

const char* scalingModeName(ScalingMode mode) { return kScalingModeNames.name(mode).data(); }

void scaleByPowerOfTwo(const float* in, float* out, int64_t n, int shift) {
  if (shift == 0) {
    if (in != out) std::copy(in, in + n, out);
    return;
  }
  const double factor = std::ldexp(1.0, std::clamp(shift, -1100, 1100));  // exact in double
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<double>(in[i]) * factor);
}

void scaleByPowerOfTwo(float* data, int64_t n, int shift) { scaleByPowerOfTwo(data, data, n, shift); }

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

std::vector<float> ApsScaler::localExponents(const std::vector<LayerGradient>& layers) const {
  std::vector<float> e(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    float m = 0.0f;
    bool finite = true;
    for (int64_t i = 0; i < layers[l].size; ++i) {
      const float a = std::fabs(layers[l].data[i]);
      finite &= a <= std::numeric_limits<float>::max();  // false for inf and NaN
      m = std::max(m, a);
    }
    if (!finite) {
      e[l] = std::numeric_limits<float>::infinity();
    } else if (m == 0.0f) {
      e[l] = kZeroExponent;
    } else {
      // ceil(log2(N * m)), exactly: N * m is exact in double (m has 24 bits, N < 2^29).
      int k = 0;
      const double f = std::frexp(static_cast<double>(worldSize_) * m, &k);  // N m = f 2^k, f in [0.5, 1)
      e[l] = static_cast<float>(f == 0.5 ? k - 1 : k);
    }
  }
  return e;
}

ApsScaler::Shifts ApsScaler::shifts(const std::vector<LayerGradient>& layers, const MaxReduce& reduceMax) const {
  Shifts out;
  out.shift.assign(layers.size(), 0);
  out.nonFinite.assign(layers.size(), false);
  if (mode_ == ScalingMode::None || layers.empty()) return out;
  std::vector<float> e = localExponents(layers);
  if (mode_ == ScalingMode::Global) {
    // Global: one exponent for all layers (the max), so one shift. A non-finite layer makes
    // every layer's shift 0; the caller sees anyNonFinite.
    float g = *std::max_element(e.begin(), e.end());
    if (reduceMax) reduceMax(&g, 1);
    std::fill(e.begin(), e.end(), g);
  } else if (reduceMax) {
    reduceMax(e.data(), static_cast<int64_t>(e.size()));
  }
  for (size_t l = 0; l < layers.size(); ++l) {
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
