#include "precision/QuantizationStats.h"

#include "framework/core/Error.h"

#include <cmath>

namespace aps::precision {

QuantizationCounts QuantizationCounts::measure(const float* x, const float* q, int64_t n, float maxValue) {
  QuantizationCounts c;
  c.total = n;
  for (int64_t i = 0; i < n; ++i) {
    const bool finiteIn = std::isfinite(x[i]);
    c.nonzero += x[i] != 0.0f;
    c.flushed += x[i] != 0.0f && q[i] == 0.0f;
    c.saturated += finiteIn && !(std::fabs(q[i]) < maxValue);
    if (finiteIn && std::isfinite(q[i])) {
      const double d = static_cast<double>(x[i]) - q[i];
      c.errorSquared += d * d;
      c.inputSquared += static_cast<double>(x[i]) * x[i];
    }
  }
  return c;
}

QuantizationCounts& QuantizationCounts::operator+=(const QuantizationCounts& o) {
  total += o.total;
  nonzero += o.nonzero;
  flushed += o.flushed;
  saturated += o.saturated;
  errorSquared += o.errorSquared;
  inputSquared += o.inputSquared;
  return *this;
}

double QuantizationCounts::relativeError() const {
  return inputSquared > 0.0 ? std::sqrt(errorSquared / inputSquared) : 0.0;
}

LayerStatistics::LayerStatistics(size_t layers, int window) : window_(window), history_(layers) {
  APS_CHECK(window >= 1, "layer statistics: window = {} must be >= 1", window);
}

void LayerStatistics::record(size_t layer, const QuantizationCounts& step) {
  auto& h = history_.at(layer);
  h.push_back(step);
  while (static_cast<int>(h.size()) > window_) h.pop_front();
}

QuantizationCounts LayerStatistics::window(size_t layer) const {
  QuantizationCounts sum;
  for (const auto& c : history_.at(layer)) sum += c;
  return sum;
}

}  // namespace aps::precision
