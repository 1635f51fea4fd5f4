#include "precision/DynamicLossScaler.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/tensor/cuda/CudaAllocator.h"
#include "framework/tensor/cuda/CudaRuntime.h"
#include "framework/numerics/FormatRounding.h"
#include "precision/cuda/CodecKernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <optional>

namespace aps::precision {

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

bool DynamicLossScaler::unscaleGradients(const NamedTensors& params, precision::ComputeFormat gradFormat) const {
  const float inverse = static_cast<float>(1.0 / state_.scale);
  std::atomic<bool> finite{true};
  // Gradients on a GPU: one kernel each, one flag for all of them, read once at the end.
  std::optional<aps::cuda::DeviceScratch> deviceFlag;
  for (const auto& p : params) {
    Tensor grad = p.tensor.grad();
    if (!grad.defined()) continue;
    APS_CHECK(grad.isContiguous() && grad.dtype() == DType::Float32,
              "loss scaler: gradient of '{}' must be a contiguous float32 tensor", p.name);
    float* g = grad.data<float>();
    if (!grad.device().isCpu()) {
      if (!deviceFlag) {
        deviceFlag.emplace(sizeof(uint32_t), grad.device().index);
        aps::cuda::zeroAsync(deviceFlag->data(), sizeof(uint32_t), nullptr);
      }
      cuda::unscaleGradient(g, grad.numel(), inverse, gradFormat, static_cast<uint32_t*>(deviceFlag->data()), nullptr);
      continue;
    }
    parallelFor(grad.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      bool ok = true;
      for (int64_t i = begin; i < end; ++i) {
        g[i] *= inverse;
        ok &= std::isfinite(g[i]);
      }
      if (!ok) finite = false;
    });
    precision::roundNearestEven(g, grad.numel(), gradFormat);
  }
  if (deviceFlag) {
    uint32_t nonFinite = 0;
    aps::cuda::copySync(&nonFinite, deviceFlag->data(), sizeof(uint32_t), aps::cuda::CopyKind::DeviceToHost);
    if (nonFinite != 0) finite = false;
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

NamedTensors DynamicLossScaler::stateDict() const {
  const std::vector<int64_t> v{std::bit_cast<int64_t>(state_.scale), state_.goodSteps, state_.skippedSteps};
  return {{"loss_scale", Tensor::fromVector(std::span<const int64_t>(v), {3})}};
}

void DynamicLossScaler::loadStateDict(const NamedTensors& state) {
  const Tensor* entry = findTensor(state, "loss_scale");
  APS_CHECK(entry != nullptr, "loss scaler: the state has no 'loss_scale'");
  const Tensor t = entry->contiguous();
  APS_CHECK(t.dtype() == DType::Int64 && t.numel() == 3, "loss scaler: 'loss_scale' must be 3 int64, got {} {}",
            t.numel(), dtypeName(t.dtype()));
  const int64_t* v = t.data<int64_t>();
  try {
    setState({std::bit_cast<double>(v[0]), v[1], v[2]});
  } catch (const Error& e) {
    APS_FAIL("{} in 'loss_scale'", e.what());
  }
}

}  // namespace aps::precision
