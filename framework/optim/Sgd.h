#pragma once

#include "framework/optim/Optimizer.h"

namespace aps::optim {

struct SgdOptions {
  double lr = 0.1;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double weightDecay = 0.0;
  bool excludeBiasAndNormFromDecay = false;  // no decay on 1-D parameters (biases, BN)
};

// torch.optim.SGD: d = g + wd * p; buf = momentum * buf + (1 - dampening) * d (buf = d on the
// first step); d = nesterov ? d + momentum * buf : buf; p -= lr * d. Float32 arithmetic.
class Sgd : public Optimizer {
 public:
  Sgd(NamedTensors params, const SgdOptions& options);

 protected:
  void update() override;

 private:
  SgdOptions options_;
};

}  // namespace aps::optim
