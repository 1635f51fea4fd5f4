#include "framework/optim/AdamW.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/optim/kernels/Updates.h"

#if defined(APS_WITH_CUDA)
#include "framework/optim/cuda/Updates.h"
#endif

#include <cmath>

namespace aps::optim {

AdamW::AdamW(NamedTensors params, const AdamWOptions& options)
    : Optimizer("AdamW", std::move(params), options.lr), options_(options) {
  APS_CHECK(options.beta1 >= 0.0 && options.beta1 < 1.0 && options.beta2 >= 0.0 && options.beta2 < 1.0,
            "AdamW: betas must be in [0, 1), got ({}, {})", options.beta1, options.beta2);
  APS_CHECK(options.eps > 0.0, "AdamW: eps must be > 0, got {}", options.eps);
  APS_CHECK(options.weightDecay >= 0.0, "AdamW: weight decay must be >= 0, got {}", options.weightDecay);
}

void AdamW::update() {
  countStep();
  const double t = static_cast<double>(stepCount());
  const float b1 = static_cast<float>(options_.beta1), b2 = static_cast<float>(options_.beta2);
  const float stepSize = static_cast<float>(lr_ / (1.0 - std::pow(options_.beta1, t)));
  const float bias2Sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(options_.beta2, t)));
  const float eps = static_cast<float>(options_.eps);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& param = params_[i].tensor;
    const Tensor grad = param.grad();
    if (!grad.defined()) continue;
    const bool decay = !(options_.excludeBiasAndNormFromDecay && isBiasOrNorm(param));
    const float shrink = decay ? static_cast<float>(1.0 - lr_ * options_.weightDecay) : 1.0f;
    const Tensor g = grad.contiguous();
    float* m = stateFor("exp_avg", i).data<float>();
    float* v = stateFor("exp_avg_sq", i).data<float>();
    float* p = param.data<float>();
    const float* pg = g.data<float>();
    const kernels::AdamWParams o{b1, b2, stepSize, bias2Sqrt, eps, shrink};
    if (param.device().isCuda()) {
#if defined(APS_WITH_CUDA)
      cuda::adamWUpdate(p, pg, m, v, param.numel(), o);
      continue;
#endif
    }
    parallelFor(param.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) kernels::adamWUpdate(p[k], pg[k], m[k], v[k], o);
    });
  }
}

}  // namespace aps::optim
