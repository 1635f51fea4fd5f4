#pragma once

// Batch norm's per-channel formulas. The per-channel sums come from the caller (CPU:
// kernels/Reduce.h lanes per plane, accumulated over images in double; CUDA: the same lanes,
// one thread each); everything after the sums is here.

#include "framework/core/HostDevice.h"
#include "framework/ops/kernels/Elementwise.h"
#include "framework/ops/kernels/Math.h"

#include <cstdint>

namespace aps::kernels {

// Statistics of one channel from sum x and sum (x - mean)^2 over its `count` values.
APS_HOST_DEVICE inline float batchNormMean(double total, int64_t count) {
  return static_cast<float>(total / static_cast<double>(count));
}
// The biased variance normalises (PyTorch's training-mode rule).
APS_HOST_DEVICE inline float batchNormInvStd(double squares, int64_t count, float eps) {
  const double var = squares / static_cast<double>(count);
  return static_cast<float>(1.0 / sqrtf64(var + static_cast<double>(eps)));
}
// The running average takes the unbiased variance.
APS_HOST_DEVICE inline float batchNormUnbiasedVar(double squares, int64_t count) {
  const double var = squares / static_cast<double>(count);
  return static_cast<float>(count > 1 ? squares / static_cast<double>(count - 1) : var);
}
APS_HOST_DEVICE inline float runningStatUpdate(float running, float batch, float momentum) {
  return fmaf32(1.0f - momentum, running, momentum * batch);
}
// Eval mode: 1 / sqrt(running var + eps) in float.
APS_HOST_DEVICE inline float batchNormEvalInvStd(float runningVar, float eps) {
  return 1.0f / sqrtf32(runningVar + eps);
}

// y = x * scale + shift with scale = gamma * invStd, shift = beta - mean * scale.
struct BatchNormAffine {
  float scale, shift;
};
APS_HOST_DEVICE inline BatchNormAffine batchNormAffine(const float* gamma, const float* beta, int64_t c, float mean,
                                                       float invStd) {
  const float g = gamma != nullptr ? gamma[c] : 1.0f;
  const float b = beta != nullptr ? beta[c] : 0.0f;
  const float scale = g * invStd;
  return {scale, fmaf32(-mean, scale, b)};
}
APS_HOST_DEVICE inline float batchNormApply(float x, BatchNormAffine a) { return fmaf32(x, a.scale, a.shift); }
// A fused op's epilogue after the affine map: the residual add (add), then ReLU (relu),
// exactly the element-wise ops the separate graph would run.
APS_HOST_DEVICE inline float batchNormAddRelu(float x, BatchNormAffine a, float residual) {
  return relu(add(batchNormApply(x, a), residual));
}
APS_HOST_DEVICE inline float batchNormRelu(float x, BatchNormAffine a) { return relu(batchNormApply(x, a)); }

// Backward from sumG = sum dy and sumGX = sum dy * (x - mean) over the channel's values:
// dx = gamma * invStd * (dy - mean(dy) - (x - mean) * invStd^2 * mean(dy * (x - mean))).
struct BatchNormGrad {
  float mean, scale, meanG, projection;
};
APS_HOST_DEVICE inline BatchNormGrad batchNormGrad(double sumG, double sumGX, int64_t count, const float* gamma,
                                                   int64_t c, float mean, float invStd) {
  const float g = gamma != nullptr ? gamma[c] : 1.0f;
  const float meanG = static_cast<float>(sumG / static_cast<double>(count));
  const float projection = static_cast<float>(sumGX / static_cast<double>(count)) * invStd * invStd;
  return {mean, g * invStd, meanG, projection};
}
APS_HOST_DEVICE inline float batchNormGradIn(float dy, float x, BatchNormGrad k) {
  return k.scale * fmaf32(-(x - k.mean), k.projection, dy - k.meanG);
}
APS_HOST_DEVICE inline float batchNormGradGamma(double sumGX, float invStd) {
  return static_cast<float>(sumGX * invStd);
}
APS_HOST_DEVICE inline float batchNormGradBeta(double sumG) { return static_cast<float>(sumG); }

}  // namespace aps::kernels
