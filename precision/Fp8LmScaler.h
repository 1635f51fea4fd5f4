#pragma once

#include "framework/tensor/NamedTensor.h"

#include "precision/ApsScaler.h"
#include "precision/FloatFormat.h"

#include <cstdint>
#include <string>

namespace aps::precision {

// FP8-LM's automatic scaling for FP8 gradient all-reduce (Peng et al., arXiv 2310.18313;
// docs/ALGORITHMS.md, FP8-LM automatic scaling): every rank multiplies its gradient by the shared scale mu (the
// minimum of the ranks' mu), so the N-way sum carries the factor N * mu, which the
// receiver divides out to get the average. After each step: if more than 0.001% of the
// scaled values hit the format's max, mu halves for the next step; otherwise it grows by
// 2^(1/growthSteps) (2x over 1000 steps).
class Fp8LmScaler {
 public:
  struct Options {
    double initialScale = 1.0;
    double saturationThreshold = 1e-5;  // fraction of values at the max that halves mu
    int growthSteps = 1000;             // steps over which mu doubles when nothing saturates
    double minScale = 0x1p-100;
    double maxScale = 0x1p100;
  };
  // Everything needed to resume bit for bit.
  struct State {
    double mu = 1.0;
    int64_t step = 0;
    bool operator==(const State&) const = default;
  };

  Fp8LmScaler(const FloatFormat& format, int worldSize, Options options);
  explicit Fp8LmScaler(const FloatFormat& format, int worldSize = 1) : Fp8LmScaler(format, worldSize, Options{}) {}

  // The scale all ranks use this step: min over ranks of mu (a MAX reduction of -mu).
  float sharedScale(const MaxReduce& reduceMax) const;
  // 1 / (N * scale): turns the sum of N scaled gradients into their average.
  float averageFactor(float scale) const { return 1.0f / (static_cast<float>(worldSize_) * scale); }
  // Values of scaled[0, n) whose magnitude reached the format's max (or is not finite).
  int64_t countSaturated(const float* scaled, int64_t n) const;
  // Updates mu from this step's counts (summed over the layers, and ranks if available).
  void update(int64_t saturated, int64_t total);

  State state() const { return state_; }
  void setState(const State& s) { state_ = s; }
  // The state for checkpoints: "state", one int64[2] {bits of the double mu, step}.
  // loadStateDict checks it (finite positive mu, non-negative step), throwing aps::Error.
  NamedTensors stateDict() const;
  void loadStateDict(const NamedTensors& state);

 private:
  FloatFormat format_;
  int worldSize_;
  Options options_;
  State state_;
};

}  // namespace aps::precision
