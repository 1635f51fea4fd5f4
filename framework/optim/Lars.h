#pragma once

#include "framework/optim/Optimizer.h"

namespace aps::optim {

struct LarsOptions {
  double lr = 0.1;
  double momentum = 0.9;
  double weightDecay = 0.0;
  double trustCoefficient = 0.001;  // eta in You et al. 2017
  double eps = 1e-9;
  bool excludeBiasAndNorm = true;  // 1-D parameters: plain momentum SGD, no decay, no trust ratio
};

// LARS (You, Gitman, Ginsburg 2017, "Large Batch Training of Convolutional Networks"), per
// parameter tensor l: local_lr = eta * ||w|| / (||g|| + wd * ||w|| + eps) (1 when either
// norm is zero); v = m * v + lr * local_lr * (g + wd * w); w -= v. Norms are summed in fixed
// blocks in double, so they do not depend on the thread count.
class Lars : public Optimizer {
 public:
  Lars(NamedTensors params, const LarsOptions& options);
  // The trust ratio of parameter i for its current weights and gradient (for logging).
  double localLr(size_t i) const;

 protected:
  void update() override;

 private:
  LarsOptions options_;
};

}  // namespace aps::optim
