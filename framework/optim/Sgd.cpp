#include "framework/optim/Sgd.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/optim/kernels/Updates.h"

#if defined(APS_WITH_CUDA)
#include "framework/optim/cuda/Updates.h"
#endif

namespace aps::optim {

Sgd::Sgd(NamedTensors params, const SgdOptions& options)
    : Optimizer("SGD", std::move(params), options.lr), options_(options) {
  APS_CHECK(options.momentum >= 0.0, "SGD: momentum must be >= 0, got {}", options.momentum);
  APS_CHECK(options.weightDecay >= 0.0, "SGD: weight decay must be >= 0, got {}", options.weightDecay);
  APS_CHECK(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
            "SGD: Nesterov momentum needs momentum > 0 and zero dampening (momentum {}, dampening {})",
            options.momentum, options.dampening);
}

void Sgd::update() {
  const float lr = static_cast<float>(lr_);
  const float momentum = static_cast<float>(options_.momentum);
  const float dampening = static_cast<float>(options_.dampening);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& param = params_[i].tensor;
    const Tensor grad = param.grad();
    if (!grad.defined()) continue;
    const bool decay = !(options_.excludeBiasAndNormFromDecay && isBiasOrNorm(param));
    const float wd = decay ? static_cast<float>(options_.weightDecay) : 0.0f;
    const Tensor g = grad.contiguous();
    const bool first = momentum != 0.0f && !hasState("momentum_buffer", i);
    float* buf = momentum != 0.0f ? stateFor("momentum_buffer", i).data<float>() : nullptr;
    float* p = param.data<float>();
    const float* pg = g.data<float>();
    const kernels::SgdParams o{lr, momentum, dampening, wd, options_.nesterov, first};
    if (param.device().isCuda()) {
#if defined(APS_WITH_CUDA)
      cuda::sgdUpdate(p, pg, buf, param.numel(), o);
      continue;
#endif
    }
    parallelFor(param.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      if (buf != nullptr) {
        for (int64_t k = begin; k < end; ++k) kernels::sgdUpdate(p[k], pg[k], buf + k, o);
      } else {
        for (int64_t k = begin; k < end; ++k) kernels::sgdUpdate(p[k], pg[k], nullptr, o);
      }
    });
  }
  countStep();
}

}  // namespace aps::optim
