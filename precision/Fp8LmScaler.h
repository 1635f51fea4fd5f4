#pragma once

#include "framework/tensor/NamedTensor.h"
#include "framework/tensor/Stateful.h"

#include "precision/FloatFormat.h"

#include <cstdint>
#include <string>

namespace aps::precision {

// FP8-LM's automatic scaling for FP8 gradient all-reduce (Peng et al., arXiv 2310.18313;
// docs/ALGORITHMS.md, FP8-LM automatic scaling). Each tensor (parameter) of every rank is
// multiplied by one factor, the same on every rank:
//   factor = mu * 2^floor(log2(max / amax)) / sqrt(N)
// where amax is the tensor's absolute maximum over all ranks (a MAX reduction), max the
// format's largest finite value and N the number of ranks: the per-tensor scale maps the
// largest value onto the format's max, the 1/sqrt(N) pre-scale leaves room for the sum to grow
// (MS-AMP's FP8 data-parallel code), and mu, shared by all tensors and ranks (the minimum over
// ranks), corrects both from experience: after each step, if more than 0.001% of the scaled
// values (inputs and reduced sums) hit the format's max, mu halves for the next step;
// otherwise it grows by 2^(1/growthSteps) (2x over 1000 steps). An overflow that made the reduced
// sum non-finite (formats without saturation turn it into NaN or inf, and the step is skipped)
// halves mu whatever the fraction. With perTensor false the
// factor is mu alone, on raw gradients. The receiver divides each tensor's sum by its factor.
class Fp8LmScaler : public Stateful {
 public:
  struct Options {
    double initialScale = 1.0;
    double saturationThreshold = 1e-5;  // fraction of values at the max that halves mu
    int growthSteps = 1000;             // steps over which mu doubles when nothing saturates
    double minScale = 0x1p-100;
    double maxScale = 0x1p100;
    // The per-tensor amax scale and the 1/sqrt(N) pre-scale (FP8-LM as published); false: mu alone.
    bool perTensor = true;
  };
  // Everything needed to resume bit for bit.
  struct State {
    double mu = 1.0;
    int64_t step = 0;
    bool operator==(const State&) const = default;
  };

  Fp8LmScaler(const FloatFormat& format, int worldSize, Options options);
  explicit Fp8LmScaler(const FloatFormat& format, int worldSize = 1) : Fp8LmScaler(format, worldSize, Options{}) {}

  bool perTensor() const { return options_.perTensor; }
  // The factor of a tensor whose absolute maximum over all ranks is `amax`, given the shared mu
  // (the minimum of the ranks' mu): mu * 2^floor(log2(max / amax)) / sqrt(N), or mu alone
  // without perTensor. An amax of zero or not finite takes the per-tensor scale 1 (the result
  // is zero or the step is skipped, whatever the scale). The factor is clamped to float's
  // normal range.
  float factor(double mu, float amax) const;
  // Values of scaled[0, n) whose magnitude reached the format's max (or is not finite).
  int64_t countSaturated(const float* scaled, int64_t n) const;
  // The magnitude countSaturated counts from: the format's largest finite value.
  float saturationLimit() const;
  // Updates mu from this step's counts (summed over the layers, and ranks if available);
  // `overflowed`: the reduced sum held a value that is not finite (mu halves).
  void update(int64_t saturated, int64_t total, bool overflowed = false);

  State state() const { return state_; }
  void setState(const State& s) { state_ = s; }
  // The state for checkpoints: "state", one int64[2] {bits of the double mu, step}.
  // loadStateDict checks it (finite positive mu, non-negative step), throwing aps::Error.
  NamedTensors stateDict() const override;
  void loadStateDict(const NamedTensors& state) override;

 private:
  FloatFormat format_;
  int worldSize_;
  Options options_;
  State state_;
};

}  // namespace aps::precision
