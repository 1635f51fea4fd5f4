#include "framework/nn/Linear.h"

#include "framework/core/Error.h"
#include "framework/nn/Init.h"
#include "framework/ops/Linear.h"

namespace aps::nn {

Linear::Linear(int64_t in, int64_t out, Rng& rng, bool bias) : Module("Linear") {
  APS_CHECK(in >= 1 && out >= 1, "Linear: features must be >= 1, got in {} out {}", in, out);
  weight_ = Tensor::empty({out, in});
  if (bias) bias_ = Tensor::empty({out});
  init::defaultLayerInit(weight_, bias_, rng);
  registerParameter("weight", weight_);
  if (bias) registerParameter("bias", bias_);
}

Tensor Linear::forward(const Tensor& input) { return ops::linear(input, weight_, bias_); }

}  // namespace aps::nn
