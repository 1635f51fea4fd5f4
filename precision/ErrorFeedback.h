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
  // Residuals of the given sizes, zero.
  explicit ErrorFeedback(std::vector<int64_t> layerSizes);
  // `layers` residuals, each empty until its first sized update (a layer never quantized
  // has none, and a checkpoint stores nothing for it).
  static ErrorFeedback empty(size_t layers);

  // grad[0, size) += residual of `layer` (before scaling and quantizing); nothing while the
  // residual is empty.
  void compensate(size_t layer, float* grad) const;
  // residual = intended - sent: `intended` the compensated gradient, `sent` what the
  // quantizer made of it, back in gradient units (decoded and unscaled).
  void update(size_t layer, const float* intended, const float* sent);
  // The same for n values that were scaled by 2^shift * scale before quantizing: the
  // residual is sized to n and brought back to gradient units (an exact power-of-two
  // unscaling, then a division by `scale` unless it is 1).
  void update(size_t layer, const float* intended, const float* sent, int64_t n, int shift, float scale);
  void reset();

  size_t layers() const { return residuals_.size(); }
  const std::vector<float>& residual(size_t layer) const { return residuals_.at(layer); }
  // The state for checkpoints: every layer's residual.
  const std::vector<std::vector<float>>& state() const { return residuals_; }
  void setState(std::vector<std::vector<float>> residuals);
  // One layer's residual from a checkpoint (any size: empty, or the layer's values).
  void setResidual(size_t layer, std::vector<float> values) { residuals_.at(layer) = std::move(values); }

 private:
  std::vector<std::vector<float>> residuals_;
};

}  // namespace aps::precision
