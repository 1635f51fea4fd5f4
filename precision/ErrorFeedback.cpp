#include "precision/ErrorFeedback.h"

#include "framework/core/Error.h"
#include "precision/kernels/Quantization.h"

#include <algorithm>

namespace aps::precision {

ErrorFeedback::ErrorFeedback(std::vector<int64_t> layerSizes) {
  residuals_.reserve(layerSizes.size());
  for (int64_t n : layerSizes) {
    APS_CHECK(n >= 0, "error feedback: layer size {} must be >= 0", n);
    residuals_.emplace_back(static_cast<size_t>(n), 0.0f);
  }
}

ErrorFeedback ErrorFeedback::empty(size_t layers) { return ErrorFeedback(std::vector<int64_t>(layers, 0)); }

void ErrorFeedback::compensate(size_t layer, float* grad) const {
  const auto& r = residuals_.at(layer);
  for (size_t i = 0; i < r.size(); ++i) grad[i] += r[i];
}

void ErrorFeedback::update(size_t layer, const float* intended, const float* sent) {
  auto& r = residuals_.at(layer);
  for (size_t i = 0; i < r.size(); ++i) r[i] = kernels::feedbackResidual(intended[i], sent[i], 0, 1.0f);
}

void ErrorFeedback::update(size_t layer, const float* intended, const float* sent, int64_t n, int shift, float scale) {
  APS_CHECK(n >= 0, "error feedback: layer size {} must be >= 0", n);
  auto& r = residuals_.at(layer);
  r.resize(static_cast<size_t>(n));
  for (size_t i = 0; i < r.size(); ++i) r[i] = kernels::feedbackResidual(intended[i], sent[i], shift, scale);
}

void ErrorFeedback::reset() {
  for (auto& r : residuals_) std::fill(r.begin(), r.end(), 0.0f);
}

void ErrorFeedback::setState(std::vector<std::vector<float>> residuals) {
  APS_CHECK(residuals.size() == residuals_.size(), "error feedback: state has {} layers, expected {}", residuals.size(),
            residuals_.size());
  for (size_t l = 0; l < residuals.size(); ++l) {
    APS_CHECK(residuals[l].size() == residuals_[l].size(), "error feedback: layer {} state has {} values, expected {}",
              l, residuals[l].size(), residuals_[l].size());
  }
  residuals_ = std::move(residuals);
}

}  // namespace aps::precision
