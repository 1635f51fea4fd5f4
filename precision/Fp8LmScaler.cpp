#include "precision/Fp8LmScaler.h"

#include "framework/core/Error.h"

#include <fmt/format.h>

#include <algorithm>
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

float Fp8LmScaler::sharedScale(const MaxReduce& reduceMax) const {
  float negMu = -static_cast<float>(state_.mu);
  if (reduceMax) reduceMax(&negMu, 1);
  return -negMu;
}

int64_t Fp8LmScaler::countSaturated(const float* scaled, int64_t n) const {
  const float maxValue = format_.maxValue();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += !(std::fabs(scaled[i]) < maxValue);  // NaN counts
  return count;
}

void Fp8LmScaler::update(int64_t saturated, int64_t total) {
  const double fraction = total > 0 ? static_cast<double>(saturated) / static_cast<double>(total) : 0.0;
  if (fraction > options_.saturationThreshold) {
    state_.mu *= 0.5;
  } else {
    state_.mu *= std::exp2(1.0 / options_.growthSteps);
  }
  state_.mu = std::clamp(state_.mu, options_.minScale, options_.maxScale);
  ++state_.step;
}

std::string Fp8LmScaler::serialize() const { return fmt::format("fp8lm mu={:a} step={}", state_.mu, state_.step); }

Fp8LmScaler::State Fp8LmScaler::deserialize(const std::string& text) {
  State s;
  long long step = 0;
  char tail = 0;
  const int got = std::sscanf(text.c_str(), "fp8lm mu=%la step=%lld%c", &s.mu, &step, &tail);
  APS_CHECK(got == 2 && s.mu > 0, "fp8lm scaler: cannot read state '{}'", text);
  s.step = step;
  return s;
}

}  // namespace aps::precision
