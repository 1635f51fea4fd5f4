#pragma once

// The per-element updates of the optimizers, written once for the CPU loops (optim/*.cpp)
// and the CUDA kernels (optim/cuda/Updates.h). Each takes one element's parameter, gradient
// and state by reference and updates them in place; the hyperparameters arrive already cast
// to float, as the CPU loops have always used them. The 16-bit storage formats are not an
// update variant: the update runs in fp32 and Optimizer::step rounds the stored values
// afterwards (framework/numerics/FormatRounding.h).

#include "framework/core/HostDevice.h"
#include "framework/ops/kernels/Math.h"

#include <cmath>
#include <cstdint>

namespace aps::optim::kernels {

using aps::kernels::fmaf32;
using aps::kernels::fmaf64;

// SGD with weight decay, momentum (with dampening, PyTorch's first-step rule: the buffer
// starts as the first gradient) and Nesterov momentum. buf is null without momentum.
struct SgdParams {
  float lr, momentum, dampening, weightDecay;
  bool nesterov, first;
};
APS_HOST_DEVICE inline void sgdUpdate(float& p, float grad, float* buf, const SgdParams& o) {
  float d = grad;
  if (o.weightDecay != 0.0f) d = fmaf32(o.weightDecay, p, d);
  if (buf != nullptr) {
    *buf = o.first ? d : fmaf32(o.momentum, *buf, (1.0f - o.dampening) * d);
    d = o.nesterov ? fmaf32(o.momentum, *buf, d) : *buf;
  }
  p = fmaf32(-o.lr, d, p);
}

// LARS (You et al., 2017): v = momentum * v + localLr * (g + wd * p); p -= v. scaledLr is the
// global rate times the layer's trust ratio, computed from the norms by the caller.
APS_HOST_DEVICE inline void larsUpdate(float& p, float grad, float& v, float momentum, float scaledLr, float wd) {
  v = fmaf32(momentum, v, scaledLr * fmaf32(wd, p, grad));
  p -= v;
}

// LARS's L2 norms: the squared values of each block of kNormBlock elements are added in
// order in double, and the blocks' sums are then added in order, so the norm depends only
// on the values (the CPU gives threads whole blocks; a CUDA thread takes one block).
constexpr int64_t kNormBlock = 4096;
APS_HOST_DEVICE inline double squaredNormBlock(const float* x, int64_t n, int64_t block) {
  const int64_t end = block * kNormBlock + kNormBlock < n ? block * kNormBlock + kNormBlock : n;
  double s = 0.0;
  for (int64_t i = block * kNormBlock; i < end; ++i) s = fmaf64(x[i], x[i], s);
  return s;
}

// LARS's trust ratio from the two L2 norms (double, as the CPU computes them).
APS_HOST_DEVICE inline double larsLocalLr(double wNorm, double gNorm, double trustCoefficient, double weightDecay,
                                          double eps) {
  if (wNorm == 0.0 || gNorm == 0.0) return 1.0;
  return trustCoefficient * wNorm / (fmaf64(weightDecay, wNorm, gNorm) + eps);
}

// AdamW (Loshchilov & Hutter, 2019) with decoupled weight decay: shrink = 1 - lr * wd,
// stepSize = lr / (1 - beta1^t), bias2Sqrt = sqrt(1 - beta2^t), computed once per step.
struct AdamWParams {
  float beta1, beta2, stepSize, bias2Sqrt, eps, shrink;
};
APS_HOST_DEVICE inline void adamWUpdate(float& p, float grad, float& m, float& v, const AdamWParams& o) {
  p *= o.shrink;
  m = fmaf32(o.beta1, m, (1.0f - o.beta1) * grad);
  v = fmaf32(o.beta2, v, (1.0f - o.beta2) * grad * grad);
#if APS_DEVICE_CODE
  const float root = ::sqrtf(v);
#else
  const float root = std::sqrt(v);
#endif
  p -= o.stepSize * m / (root / o.bias2Sqrt + o.eps);
}

}  // namespace aps::optim::kernels
