#include "framework/optim/ClipGrad.h"

#include "framework/core/Error.h"

#include <algorithm>
#include <cmath>
#include <span>

namespace aps::optim {

namespace {

// A parameter's gradient as float32 values on the CPU (empty when it has none).
std::span<float> gradValues(const NamedTensor& p) {
  Tensor grad = p.tensor.grad();
  if (!grad.defined()) return {};
  APS_CHECK(grad.device().isCpu() && grad.dtype() == DType::Float32 && grad.isContiguous(),
            "gradient clipping: '{}' has a {} {} gradient; it clips contiguous float32 gradients on the CPU", p.name,
            dtypeName(grad.dtype()), grad.device().isCpu() ? "cpu" : "device");
  return {grad.data<float>(), static_cast<size_t>(grad.numel())};
}

}  // namespace

double clipGradNorm(const NamedTensors& params, double maxNorm) {
  APS_CHECK(maxNorm > 0, "clip_grad_norm: the largest norm must be positive, got {}", maxNorm);
  double squares = 0;
  for (const auto& p : params) {
    for (const float g : gradValues(p)) squares += static_cast<double>(g) * static_cast<double>(g);
  }
  const double norm = std::sqrt(squares);
  const double coefficient = maxNorm / (norm + 1e-6);  // PyTorch's, which scales only below 1
  if (!std::isfinite(norm) || coefficient >= 1) return norm;
  const auto factor = static_cast<float>(coefficient);
  for (const auto& p : params) {
    for (float& g : gradValues(p)) g *= factor;
  }
  return norm;
}

void clipGradValue(const NamedTensors& params, double maxValue) {
  APS_CHECK(maxValue > 0, "clip_grad_value: the bound must be positive, got {}", maxValue);
  const auto bound = static_cast<float>(maxValue);
  for (const auto& p : params) {
    for (float& g : gradValues(p)) g = std::clamp(g, -bound, bound);
  }
}

}  // namespace aps::optim
