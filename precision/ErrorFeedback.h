#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace aps::precision {

// Error feedback (error compensation): the part of a layer's gradient that quantization
// dropped this step is added to the next step's gradient, so nothing is lost for good,
// only delayed (as in 1-bit SGD, Seide et al. 2014, and EF-SGD, Karimireddy et al. 2019).
class ErrorFeedback {
 public:
  explicit ErrorFeedback(std::vector<int64_t> layerSizes);

  // grad[0, size) += residual of `layer` (before scaling and quantizing).
  void compensate(size_t layer, float* grad) const;
  // residual = intended - sent: `intended` the compensated gradient, `sent` what the
  // quantizer made of it, back in gradient units (decoded and unscaled).
  void update(size_t layer, const float* intended, const float* sent);
  void reset();

  size_t layers() const { return residuals_.size(); }
  const std::vector<float>& residual(size_t layer) const { return residuals_.at(layer); }
  // The state for checkpoints: every layer's residual.
  const std::vector<std::vector<float>>& state() const { return residuals_; }
  void setState(std::vector<std::vector<float>> residuals);

 private:
  std::vector<std::vector<float>> residuals_;
};

}  // namespace aps::precision
