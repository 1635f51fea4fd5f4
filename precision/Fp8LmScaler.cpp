#include "precision/Fp8LmScaler.h"

#include "framework/core/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>

namespace aps::precision {

Fp8LmScaler::Fp8LmScaler(const FloatFormat& format, int worldSize, Options options)
    : format_(format), worldSize_(worldSize), options_(options) {
  format_.validate();
  APS_CHECK(worldSize >= 1, "fp8lm scaler: world size {} must be >= 1", worldSize);
  APS_CHECK(options.growthSteps >= 1, "fp8lm scaler: growth_steps = {} must be >= 1", options.growthSteps);
  APS_CHECK(options.initialScale > 0, "fp8lm scaler: initial_scale = {} must be > 0", options.initialScale);
  state_.mu = options.initialScale;
}

float Fp8LmScaler::factor(double mu, float amax) const {
  double f = mu;
  if (options_.perTensor) {
    if (amax > 0 && std::isfinite(amax)) {
      // floor(log2(q)) exactly: a quotient of two floats is never within 2^-53 of a power of
      // two without being one, so the rounded double quotient has the same binade.
      const double q = static_cast<double>(format_.maxValue()) / static_cast<double>(amax);
      f = std::ldexp(f, std::clamp(std::ilogb(q), -200, 200));
    }
    f /= std::sqrt(static_cast<double>(worldSize_));
  }
  return static_cast<float>(std::clamp(f, 0x1p-126, 0x1p127));
}

float Fp8LmScaler::saturationLimit() const { return format_.maxValue(); }

int64_t Fp8LmScaler::countSaturated(const float* scaled, int64_t n) const {
  const float maxValue = saturationLimit();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += !(std::fabs(scaled[i]) < maxValue);  // NaN counts
  return count;
}

void Fp8LmScaler::update(int64_t saturated, int64_t total, bool overflowed) {
  const double fraction = total > 0 ? static_cast<double>(saturated) / static_cast<double>(total) : 0.0;
  // The paper's casts saturate, so its overflows show up as values at the max and the
  // threshold decides; where an overflow became NaN or inf the whole step is lost, and growing
  // mu because few values overflowed would lose the next one too.
  if (overflowed || fraction > options_.saturationThreshold) {
    state_.mu *= 0.5;
  } else {
    state_.mu *= std::exp2(1.0 / options_.growthSteps);
  }
  state_.mu = std::clamp(state_.mu, options_.minScale, options_.maxScale);
  ++state_.step;
}

NamedTensors Fp8LmScaler::stateDict() const {
  const std::vector<int64_t> v{std::bit_cast<int64_t>(state_.mu), state_.step};
  return {{"state", Tensor::fromVector(std::span<const int64_t>(v), {2})}};
}

void Fp8LmScaler::loadStateDict(const NamedTensors& state) {
  const Tensor* entry = findTensor(state, "state");
  APS_CHECK(entry != nullptr, "fp8lm scaler: the state has no 'state'");
  const Tensor t = entry->contiguous();
  APS_CHECK(t.dtype() == DType::Int64 && t.numel() == 2, "fp8lm scaler: 'state' must be 2 int64, got {} {}", t.numel(),
            dtypeName(t.dtype()));
  const double mu = std::bit_cast<double>(t.data<int64_t>()[0]);
  const int64_t step = t.data<int64_t>()[1];
  APS_CHECK(std::isfinite(mu) && mu > 0 && step >= 0, "fp8lm scaler: 'state' holds mu {} and step {}", mu, step);
  setState({mu, step});
}

}  // namespace aps::precision
