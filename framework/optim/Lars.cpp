#include "framework/optim/Lars.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/optim/kernels/Updates.h"

#if defined(APS_WITH_CUDA)
#include "framework/optim/cuda/Updates.h"
#endif

#include <algorithm>
#include <cmath>

namespace aps::optim {

namespace {
double l2Norm(const float* p, int64_t n) {
  const int64_t blocks = (n + kernels::kNormBlock - 1) / kernels::kNormBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  parallelFor(blocks, 4, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) partial[static_cast<size_t>(b)] = kernels::squaredNormBlock(p, n, b);
  });
  double total = 0.0;
  for (double s : partial) total += s;
  return std::sqrt(total);
}
}  // namespace

Lars::Lars(NamedTensors params, const LarsOptions& options)
    : Optimizer("LARS", std::move(params), options.lr), options_(options) {
  APS_CHECK(options.momentum >= 0.0, "LARS: momentum must be >= 0, got {}", options.momentum);
  APS_CHECK(options.weightDecay >= 0.0, "LARS: weight decay must be >= 0, got {}", options.weightDecay);
  APS_CHECK(options.trustCoefficient > 0.0, "LARS: trust coefficient must be > 0, got {}", options.trustCoefficient);
}

double Lars::localLr(size_t i) const {
  const Tensor& param = params_.at(i).tensor;
  if (options_.excludeBiasAndNorm && isBiasOrNorm(param)) return 1.0;
  const Tensor grad = param.grad();
  if (!grad.defined()) return 1.0;
  const Tensor g = grad.contiguous();
  double wNorm = 0.0, gNorm = 0.0;
  if (param.device().isCuda()) {
#if defined(APS_WITH_CUDA)
    wNorm = cuda::l2Norm(param.data<float>(), param.numel());
    gNorm = cuda::l2Norm(g.data<float>(), g.numel());
#endif
  } else {
    wNorm = l2Norm(param.data<float>(), param.numel());
    gNorm = l2Norm(g.data<float>(), g.numel());
  }
  return kernels::larsLocalLr(wNorm, gNorm, options_.trustCoefficient, options_.weightDecay, options_.eps);
}

void Lars::update() {
  const float momentum = static_cast<float>(options_.momentum);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& param = params_[i].tensor;
    const Tensor grad = param.grad();
    if (!grad.defined()) continue;
    const bool adapted = !(options_.excludeBiasAndNorm && isBiasOrNorm(param));
    const float wd = adapted ? static_cast<float>(options_.weightDecay) : 0.0f;
    const float scaledLr = static_cast<float>(lr_ * localLr(i));
    const Tensor g = grad.contiguous();
    float* v = stateFor("momentum_buffer", i).data<float>();
    float* p = param.data<float>();
    const float* pg = g.data<float>();
    if (param.device().isCuda()) {
#if defined(APS_WITH_CUDA)
      cuda::larsUpdate(p, pg, v, param.numel(), momentum, scaledLr, wd);
      continue;
#endif
    }
    parallelFor(param.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) kernels::larsUpdate(p[k], pg[k], v[k], momentum, scaledLr, wd);
    });
  }
  countStep();
}

}  // namespace aps::optim
