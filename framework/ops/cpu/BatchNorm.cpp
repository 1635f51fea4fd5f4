// Batch normalisation (Ioffe & Szegedy, 2015) over (N, C, H*W), with PyTorch's running
// statistics: biased variance to normalise, unbiased variance in the running average.
// Work is split over channels and each channel is reduced by one thread in a fixed order
// (per-plane lane sums, accumulated over images in double), so no result depends on the
// thread count.
#include "framework/ops/kernels/BatchNorm.h"
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/core/Profile.h"
#include "framework/ops/cpu/Kernels.h"
#include "framework/ops/cpu/Reduce.h"

namespace aps::cpu {

namespace {

void checkShape(const BatchNormShape& s) {
  APS_CHECK(s.n >= 1 && s.c >= 1 && s.hw >= 1, "batch_norm: sizes must be positive (n={}, c={}, hw={})", s.n, s.c,
            s.hw);
}

// out = in * scale + shift over channel c's planes.
void affine(float* out, const float* in, int64_t c, kernels::BatchNormAffine a, const BatchNormShape& s) {
  for (int64_t n = 0; n < s.n; ++n) {
    const float* x = in + (n * s.c + c) * s.hw;
    float* y = out + (n * s.c + c) * s.hw;
    for (int64_t i = 0; i < s.hw; ++i) y[i] = kernels::batchNormApply(x[i], a);
  }
}

}  // namespace

void batchNormForwardTrain(float* out, float* saveMean, float* saveInvStd, float* runningMean, float* runningVar,
                           const float* in, const float* gamma, const float* beta, const BatchNormShape& shape,
                           float momentum, float eps) {
  checkShape(shape);
  // Statistics pass and normalising pass read the input, one write: 3 x 4 bytes per value.
  const double values = static_cast<double>(shape.n * shape.c * shape.hw);
  const profile::Scope scope("batchnorm.forward", 5.0 * values, 12.0 * values);
  const BatchNormShape& s = shape;
  const int64_t count = s.n * s.hw;
  parallelFor(s.c, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double total = 0.0;
      for (int64_t n = 0; n < s.n; ++n) total += detail::sum(in + (n * s.c + c) * s.hw, s.hw);
      const float mean = kernels::batchNormMean(total, count);
      // Two passes (mean, then squared deviations) avoid the cancellation of E[x^2] - E[x]^2.
      double squares = 0.0;
      for (int64_t n = 0; n < s.n; ++n) squares += detail::sumSquaredDeviation(in + (n * s.c + c) * s.hw, mean, s.hw);
      const float invStd = kernels::batchNormInvStd(squares, count, eps);
      if (saveMean != nullptr) saveMean[c] = mean;
      if (saveInvStd != nullptr) saveInvStd[c] = invStd;
      if (runningMean != nullptr) runningMean[c] = kernels::runningStatUpdate(runningMean[c], mean, momentum);
      if (runningVar != nullptr) {
        runningVar[c] =
            kernels::runningStatUpdate(runningVar[c], kernels::batchNormUnbiasedVar(squares, count), momentum);
      }
      affine(out, in, c, kernels::batchNormAffine(gamma, beta, c, mean, invStd), s);
    }
  });
}

void batchNormForwardEval(float* out, const float* in, const float* gamma, const float* beta, const float* runningMean,
                          const float* runningVar, const BatchNormShape& shape, float eps) {
  checkShape(shape);
  const BatchNormShape& s = shape;
  parallelFor(s.c, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float invStd = kernels::batchNormEvalInvStd(runningVar[c], eps);
      affine(out, in, c, kernels::batchNormAffine(gamma, beta, c, runningMean[c], invStd), s);
    }
  });
}

void batchNormBackward(float* gradIn, float* gradGamma, float* gradBeta, const float* gradOut, const float* in,
                       const float* gamma, const float* saveMean, const float* saveInvStd,
                       const BatchNormShape& shape) {
  checkShape(shape);
  // Reduction pass reads gradOut and the input, the second pass both again and writes gradIn.
  const double values = static_cast<double>(shape.n * shape.c * shape.hw);
  const profile::Scope scope("batchnorm.backward", 8.0 * values, 20.0 * values);
  const BatchNormShape& s = shape;
  const int64_t count = s.n * s.hw;
  parallelFor(s.c, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float mean = saveMean[c];
      const float invStd = saveInvStd[c];
      double sumG = 0.0, sumGX = 0.0;  // sum dy, sum dy * (x - mean)
      for (int64_t n = 0; n < s.n; ++n) {
        const int64_t offset = (n * s.c + c) * s.hw;
        sumG += detail::sum(gradOut + offset, s.hw);
        sumGX += detail::dotDeviation(gradOut + offset, in + offset, mean, s.hw);
      }
      if (gradBeta != nullptr) gradBeta[c] = kernels::batchNormGradBeta(sumG);
      if (gradGamma != nullptr) gradGamma[c] = kernels::batchNormGradGamma(sumGX, invStd);
      if (gradIn == nullptr) continue;
      const kernels::BatchNormGrad k = kernels::batchNormGrad(sumG, sumGX, count, gamma, c, mean, invStd);
      for (int64_t n = 0; n < s.n; ++n) {
        const int64_t offset = (n * s.c + c) * s.hw;
        const float* dy = gradOut + offset;
        const float* x = in + offset;
        float* dx = gradIn + offset;
        for (int64_t i = 0; i < s.hw; ++i) dx[i] = kernels::batchNormGradIn(dy[i], x[i], k);
      }
    }
  });
}

}  // namespace aps::cpu
