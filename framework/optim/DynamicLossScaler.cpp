#include "framework/optim/DynamicLossScaler.h"

#include "framework/autograd/FormatRounding.h"
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

namespace aps::optim {

DynamicLossScaler::DynamicLossScaler(const Options& options) : options_(options) {
  APS_CHECK(options.minScale > 0 && options.minScale <= options.maxScale,
            "loss scaler: min scale {} must be > 0 and <= max scale {}", options.minScale, options.maxScale);
  APS_CHECK(options.initialScale >= options.minScale && options.initialScale <= options.maxScale,
            "loss scaler: initial scale {} is outside [{}, {}]", options.initialScale, options.minScale,
            options.maxScale);
  APS_CHECK(options.growthFactor >= 1.0, "loss scaler: growth factor must be >= 1, got {}", options.growthFactor);
  // 1.0 is static loss scaling (precision.loss_scaling: static): the scale never changes.
  APS_CHECK(options.backoffFactor > 0.0 && options.backoffFactor <= 1.0,
            "loss scaler: backoff factor must be in (0, 1] (1: static scaling), got {}", options.backoffFactor);
  APS_CHECK(options.growthInterval >= 1, "loss scaler: growth interval must be >= 1, got {}", options.growthInterval);
  state_.scale = options.initialScale;
}

Tensor DynamicLossScaler::rootGradient() const { return Tensor::scalar(scale()); }

bool DynamicLossScaler::unscaleGradients(const NamedTensors& params, autograd::ComputeFormat gradFormat) const {
  const float inverse = static_cast<float>(1.0 / state_.scale);
  std::atomic<bool> finite{true};
  for (const auto& p : params) {
    Tensor grad = p.tensor.grad();
    if (!grad.defined()) continue;
    APS_CHECK(grad.isContiguous() && grad.dtype() == DType::Float32,
              "loss scaler: gradient of '{}' must be a contiguous float32 tensor", p.name);
    float* g = grad.data<float>();
    parallelFor(grad.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      bool ok = true;
      for (int64_t i = begin; i < end; ++i) {
        g[i] *= inverse;
        ok &= std::isfinite(g[i]);
      }
      if (!ok) finite = false;
    });
    autograd::roundNearestEven(g, grad.numel(), gradFormat);
  }
  return finite;
}

bool DynamicLossScaler::gradientsFinite(const NamedTensors& params) {
  for (const auto& p : params) {
    const Tensor grad = p.tensor.grad();
    if (!grad.defined()) continue;
    for (float v : grad.toFloatVector()) {
      if (!std::isfinite(v)) return false;
    }
  }
  return true;
}

bool DynamicLossScaler::update(bool gradientsFinite) {
  if (!gradientsFinite) {
    state_.scale = std::max(options_.minScale, state_.scale * options_.backoffFactor);
    state_.goodSteps = 0;
    ++state_.skippedSteps;
    return false;
  }
  if (++state_.goodSteps >= options_.growthInterval) {
    state_.scale = std::min(options_.maxScale, state_.scale * options_.growthFactor);
    state_.goodSteps = 0;
  }
  return true;
}

void DynamicLossScaler::setState(const State& s) {
  APS_CHECK(s.scale > 0 && std::isfinite(s.scale) && s.goodSteps >= 0 && s.skippedSteps >= 0,
            "loss scaler: invalid state (scale {}, good steps {}, skipped steps {})", s.scale, s.goodSteps,
            s.skippedSteps);
  state_ = s;
}

std::string DynamicLossScaler::serialize() const {
  return fmt::format("loss_scaler scale={:a} good={} skipped={}", state_.scale, state_.goodSteps, state_.skippedSteps);
}

DynamicLossScaler::State DynamicLossScaler::deserialize(const std::string& text) {
  State s;
  long long good = 0, skipped = 0;
  char tail = 0;
  const int got =
      std::sscanf(text.c_str(), "loss_scaler scale=%la good=%lld skipped=%lld%c", &s.scale, &good, &skipped, &tail);
  APS_CHECK(got == 3 && s.scale > 0 && std::isfinite(s.scale) && good >= 0 && skipped >= 0,
            "loss scaler: cannot read state '{}'", text);
  s.goodSteps = good;
  s.skippedSteps = skipped;
  return s;
}

}  // namespace aps::optim
