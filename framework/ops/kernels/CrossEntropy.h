#pragma once

// Softmax cross-entropy with label smoothing and an ignore index, per position:
//   loss = (1 - eps) * nll + eps / C * sum_c (-log p_c).
// The CPU kernel runs a block of positions at once (classes outside, positions inside, so
// it vectorises); a CUDA thread runs one position. Both take each class in order with the
// float operations below, so they differ only where expf and log do (kernels/Math.h).

#include "framework/core/HostDevice.h"
#include "framework/ops/kernels/Math.h"

#include <cstdint>

namespace aps::kernels {

// Running max and sum of one position's logits, class by class.
APS_HOST_DEVICE inline void logitStats(float x, float& maxLogit, float& sumLogit) {
  maxLogit = maxf32(maxLogit, x);
  sumLogit += x;
}
APS_HOST_DEVICE inline float softmaxNumerator(float x, float maxLogit) { return expf32(x - maxLogit); }

// The loss of one counted position from its max logit, 1 / sum exp(x - max), target logit
// and sum of logits.
APS_HOST_DEVICE inline double crossEntropyAt(float maxLogit, float invSumExp, float targetLogit, float sumLogit,
                                             float invC, float labelSmoothing) {
  // log-sum-exp = max + log(sum exp(x - max)) = max - log(1 / sum).
  const double lse = static_cast<double>(maxLogit) - logf64(static_cast<double>(invSumExp));
  const double nll = lse - static_cast<double>(targetLogit);
  const double smooth = fmaf64(-static_cast<double>(sumLogit), invC, lse);  // mean over classes of -log p
  const double eps = labelSmoothing;
  return fmaf64(1.0 - eps, nll, eps * smooth);
}

// d loss / d x_j = p_j - (1 - eps) [j == t] - eps / C, times gradLoss / count.
struct CrossEntropyGrad {
  float scale, onTarget, uniform;
};
APS_HOST_DEVICE inline CrossEntropyGrad crossEntropyGrad(int64_t counted, float gradLoss, float labelSmoothing,
                                                         int64_t classes) {
  const float scale = counted > 0 ? gradLoss / static_cast<float>(counted) : 0.0f;
  return {scale, (1.0f - labelSmoothing) * scale, labelSmoothing / static_cast<float>(classes) * scale};
}
APS_HOST_DEVICE inline float crossEntropyGradAt(float p, int64_t target, int64_t c, int64_t ignoreIndex,
                                                CrossEntropyGrad k) {
  if (target == ignoreIndex) return 0.0f;
  return fmaf32(p, k.scale, -k.uniform) - (target == c ? k.onTarget : 0.0f);
}

}  // namespace aps::kernels
