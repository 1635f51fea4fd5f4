#include "precision/QuantizationStats.h"

#include "framework/core/Error.h"
#include "precision/kernels/Quantization.h"

#include <bit>
#include <cmath>

namespace aps::precision {

QuantizationCounts QuantizationCounts::measure(const float* x, const float* q, int64_t n, float maxValue) {
  QuantizationCounts c;
  kernels::CountSpec spec;
  spec.maxValue = maxValue;
  for (int64_t chunk = 0; chunk < kernels::chunksOf(n); ++chunk)
    c += fromPartial(kernels::countChunk(spec, x, q, n, chunk));
  return c;
}

QuantizationCounts QuantizationCounts::fromPartial(const kernels::CountsPartial& p) {
  QuantizationCounts c;
  c.total = p.total;
  c.nonzero = p.nonzero;
  c.flushed = p.flushed;
  c.saturated = p.saturated;
  c.errorSquared = p.errorSquared;
  c.inputSquared = p.inputSquared;
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

void QuantizationCounts::pack(int64_t* out) const {
  out[0] = total;
  out[1] = nonzero;
  out[2] = flushed;
  out[3] = saturated;
}

QuantizationCounts QuantizationCounts::unpack(const int64_t* in) {
  QuantizationCounts c;
  c.total = in[0];
  c.nonzero = in[1];
  c.flushed = in[2];
  c.saturated = in[3];
  return c;
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

std::vector<int64_t> LayerStatistics::serialize() const {
  std::vector<int64_t> out;
  for (const auto& h : history_) {
    out.push_back(static_cast<int64_t>(h.size()));
    for (const auto& c : h) {
      out.insert(out.end(), {c.total, c.nonzero, c.flushed, c.saturated, std::bit_cast<int64_t>(c.errorSquared),
                             std::bit_cast<int64_t>(c.inputSquared)});
    }
  }
  return out;
}

void LayerStatistics::restore(const std::vector<int64_t>& values) {
  size_t at = 0;
  auto take = [&] {
    APS_CHECK(at < values.size(), "layer statistics: the saved state ends early ({} values for {} layers)",
              values.size(), history_.size());
    return values[at++];
  };
  for (auto& h : history_) {
    const int64_t steps = take();
    APS_CHECK(steps >= 0 && steps <= window_, "layer statistics: a saved window of {} steps (window is {})", steps,
              window_);
    h.clear();
    for (int64_t i = 0; i < steps; ++i) {
      QuantizationCounts c;
      c.total = take();
      c.nonzero = take();
      c.flushed = take();
      c.saturated = take();
      c.errorSquared = std::bit_cast<double>(take());
      c.inputSquared = std::bit_cast<double>(take());
      h.push_back(c);
    }
  }
  APS_CHECK(at == values.size(), "layer statistics: the saved state has {} values, {} expected", values.size(), at);
}

QuantizationCounts LayerStatistics::window(size_t layer) const {
  QuantizationCounts sum;
  for (const auto& c : history_.at(layer)) sum += c;
  return sum;
}

}  // namespace aps::precision
