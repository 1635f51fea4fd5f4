#pragma once

#include "framework/optim/Optimizer.h"

namespace aps::optim {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 1e-2;
  bool excludeBiasAndNormFromDecay = false;
};

// AdamW (Loshchilov & Hutter 2019, decoupled weight decay) as torch.optim.AdamW:
// p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
class AdamW : public Optimizer {
 public:
  AdamW(NamedTensors params, const AdamWOptions& options);

 protected:
  void update() override;

 private:
  AdamWOptions options_;
};

}  // namespace aps::optim
