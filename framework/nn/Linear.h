#pragma once

#include "framework/core/Rng.h"
#include "framework/nn/Module.h"

namespace aps::nn {

// torch.nn.Linear: "weight" (out, in), "bias" (out), PyTorch's default init. Input (N, in).
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, Rng& rng, bool bias = true);
  Tensor forward(const Tensor& input) override;
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }

 private:
  Tensor weight_, bias_;
};

}  // namespace aps::nn
