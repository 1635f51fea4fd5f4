#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace aps::precision {

namespace kernels {
struct CountsPartial;
}

// What quantizing one layer's (scaled) gradient did to it in one step.
struct QuantizationCounts {
  int64_t total = 0;
  int64_t nonzero = 0;        // inputs that were not zero
  int64_t flushed = 0;        // nonzero inputs that became zero (underflow)
  int64_t saturated = 0;      // outputs at the format's max or not finite from finite inputs (overflow)
  double errorSquared = 0.0;  // sum (x - q)^2 over finite pairs
  double inputSquared = 0.0;  // sum x^2 over the same

  // Counts for input x[0, n) and its quantized form q[0, n) in a format whose largest
  // finite value is maxValue (summed in the chunks of kernels::countValue, as a GPU sums them).
  static QuantizationCounts measure(const float* x, const float* q, int64_t n, float maxValue);
  // One chunk's counts, as the shared arithmetic (and a GPU) gives them.
  static QuantizationCounts fromPartial(const kernels::CountsPartial& partial);

  QuantizationCounts& operator+=(const QuantizationCounts& o);

  // The integer counts (total, nonzero, flushed, saturated), as ranks exchange them; the sums
  // of squares stay local (unpack leaves them 0).
  static constexpr size_t kPacked = 4;
  void pack(int64_t* out) const;
  static QuantizationCounts unpack(const int64_t* in);
  double flushedFraction() const { return nonzero ? static_cast<double>(flushed) / nonzero : 0.0; }
  double saturatedFraction() const { return total ? static_cast<double>(saturated) / total : 0.0; }
  double relativeError() const;  // ||x - q|| / ||x||
};

// Per-layer counts over a sliding window of the last `window` steps.
class LayerStatistics {
 public:
  LayerStatistics(size_t layers, int window);

  void record(size_t layer, const QuantizationCounts& step);
  // The sum over the window's steps.
  QuantizationCounts window(size_t layer) const;
  int steps(size_t layer) const { return static_cast<int>(history_.at(layer).size()); }
  void reset(size_t layer) { history_.at(layer).clear(); }
  size_t layers() const { return history_.size(); }
  int windowSize() const { return window_; }

  // The whole window history as integers, for checkpoints: per layer its step count, then
  // six values per step (total, nonzero, flushed, saturated, and the two sums of squares
  // as the bits of their doubles). restore() takes what serialize() gave, exactly.
  std::vector<int64_t> serialize() const;
  void restore(const std::vector<int64_t>& values);

 private:
  int window_;
  std::vector<std::deque<QuantizationCounts>> history_;
};

}  // namespace aps::precision
