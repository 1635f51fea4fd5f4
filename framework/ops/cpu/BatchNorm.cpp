// Batch normalisation (Ioffe & Szegedy, 2015) over (N, C, H*W), with PyTorch's running
// statistics: biased variance to normalise, unbiased variance in the running average.
// The reductions are split over channels and each channel is reduced by one thread in a
// fixed order (per-plane lane sums, accumulated over images in double), so no result
// depends on the thread count; the element-wise passes that follow (the normalisation with
// its fused ReLU and residual add, the input gradient) run over the (n, c) planes in memory
// order, unit-stride streams that the hardware prefetches.
#include "framework/ops/kernels/BatchNorm.h"
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/core/Profile.h"
#include "framework/ops/cpu/Kernels.h"
#include "framework/ops/cpu/Reduce.h"
#include "framework/ops/cpu/Simd.h"

#include <algorithm>
#include <vector>

namespace aps::cpu {

namespace {

void checkShape(const BatchNormShape& s, const BatchNormEpilogue& e = {}) {
  APS_CHECK(s.n >= 1 && s.c >= 1 && s.hw >= 1, "batch_norm: sizes must be positive (n={}, c={}, hw={})", s.n, s.c,
            s.hw);
  APS_CHECK((e.residual == nullptr && e.reluMask == nullptr) || e.relu,
            "batch_norm: a fused residual add or ReLU mask needs the fused ReLU");
}

// out = epilogue(in * scale + shift) over planes [p0, p1) of the (n, c) planes, in memory
// order, with channel c's map a[c].
void affine(float* out, const float* in, const std::vector<kernels::BatchNormAffine>& a, int64_t p0, int64_t p1,
            const BatchNormShape& s, const BatchNormEpilogue& e) {
  const int64_t words = reluMaskWords(s.hw);
  for (int64_t p = p0; p < p1; ++p) {
    const kernels::BatchNormAffine m = a[static_cast<size_t>(p % s.c)];
    const float* x = in + p * s.hw;
    float* y = out + p * s.hw;
    if (e.residual != nullptr) {
      const float* r = e.residual + p * s.hw;
      for (int64_t i = 0; i < s.hw; ++i) y[i] = kernels::batchNormAddRelu(x[i], m, r[i]);
    } else if (e.relu) {
      for (int64_t i = 0; i < s.hw; ++i) y[i] = kernels::batchNormRelu(x[i], m);
    } else {
      for (int64_t i = 0; i < s.hw; ++i) y[i] = kernels::batchNormApply(x[i], m);
    }
    if (e.reluMask != nullptr) detail::simd::positiveBits(e.reluMask + p * words, y, s.hw);
  }
}

// One plane of batch norm's input gradient, dx = batchNormGradIn(dy, x, k), where dy is
// gradOut masked by a fused ReLU's bits (bits null: no ReLU); dy itself goes to gradRelu
// (when not null: the residual's gradient). On AVX-512 the mask applies in registers and
// dx is computed as GCC compiles batchNormGradIn's loop, one negated fused multiply-add
// (tests/ops/cpu/SharedKernelsTest.cpp holds both to a scalar reference).
void gradInPlane(float* dx, float* gradRelu, const float* gradOut, const uint16_t* bits, const float* x,
                 kernels::BatchNormGrad k, int64_t hw) {
#if defined(APS_SIMD_AVX512)
  const __m512 mean = _mm512_set1_ps(k.mean), meanG = _mm512_set1_ps(k.meanG);
  const __m512 projection = _mm512_set1_ps(k.projection), scale = _mm512_set1_ps(k.scale);
  for (int64_t i = 0; i < hw; i += 16) {
    const auto lanes = static_cast<__mmask16>(hw - i >= 16 ? 0xffffu : (1u << (hw - i)) - 1u);
    const __mmask16 on = bits != nullptr ? static_cast<__mmask16>(lanes & bits[i / 16]) : lanes;
    const __m512 g = _mm512_maskz_loadu_ps(on, gradOut + i);
    if (gradRelu != nullptr) _mm512_mask_storeu_ps(gradRelu + i, lanes, g);
    if (dx == nullptr) continue;
    const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, x + i), mean);
    _mm512_mask_storeu_ps(dx + i, lanes,
                          _mm512_mul_ps(_mm512_fnmadd_ps(d, projection, _mm512_sub_ps(g, meanG)), scale));
  }
#else
  for (int64_t i = 0; i < hw; ++i) {
    const float g = bits == nullptr || detail::simd::positiveBit(bits, i) ? gradOut[i] : 0.0f;
    if (gradRelu != nullptr) gradRelu[i] = g;
    if (dx != nullptr) dx[i] = kernels::batchNormGradIn(g, x[i], k);
  }
#endif
}

// Planes per parallel chunk of an element-wise pass: about 16 K values.
int64_t planeGrain(const BatchNormShape& s) { return std::max<int64_t>(1, (int64_t{1} << 14) / s.hw); }

}  // namespace

void batchNormForwardTrain(float* out, float* saveMean, float* saveInvStd, float* runningMean, float* runningVar,
                           const float* in, const float* gamma, const float* beta, const BatchNormShape& shape,
                           float momentum, float eps, const BatchNormEpilogue& epilogue) {
  checkShape(shape, epilogue);
  // Statistics pass and normalising pass read the input, one write: 3 x 4 bytes per value
  // (a residual is one more read).
  const double values = static_cast<double>(shape.n * shape.c * shape.hw);
  const double bytes = (epilogue.residual != nullptr ? 16.0 : 12.0) * values;
  const profile::Scope scope("batchnorm.forward", 5.0 * values, bytes);
  const BatchNormShape& s = shape;
  const int64_t count = s.n * s.hw;
  std::vector<kernels::BatchNormAffine> a(static_cast<size_t>(s.c));
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
      a[static_cast<size_t>(c)] = kernels::batchNormAffine(gamma, beta, c, mean, invStd);
    }
  });
  parallelFor(s.n * s.c, planeGrain(s), [&](int64_t p0, int64_t p1) { affine(out, in, a, p0, p1, s, epilogue); });
}

void batchNormForwardEval(float* out, const float* in, const float* gamma, const float* beta, const float* runningMean,
                          const float* runningVar, const BatchNormShape& shape, float eps) {
  checkShape(shape);
  const BatchNormShape& s = shape;
  std::vector<kernels::BatchNormAffine> a(static_cast<size_t>(s.c));
  for (int64_t c = 0; c < s.c; ++c) {
    a[static_cast<size_t>(c)] =
        kernels::batchNormAffine(gamma, beta, c, runningMean[c], kernels::batchNormEvalInvStd(runningVar[c], eps));
  }
  parallelFor(s.n * s.c, planeGrain(s), [&](int64_t p0, int64_t p1) { affine(out, in, a, p0, p1, s, {}); });
}

void reluMask(uint16_t* mask, const float* out, const BatchNormShape& shape) {
  checkShape(shape);
  const int64_t words = reluMaskWords(shape.hw);
  parallelFor(shape.n * shape.c, 16, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) detail::simd::positiveBits(mask + p * words, out + p * shape.hw, shape.hw);
  });
}

void batchNormBackward(float* gradIn, float* gradGamma, float* gradBeta, const float* gradOut, const float* in,
                       const float* gamma, const float* saveMean, const float* saveInvStd, const BatchNormShape& shape,
                       const BatchNormGradEpilogue& epilogue) {
  checkShape(shape);
  APS_CHECK(epilogue.gradResidual == nullptr || epilogue.reluMask != nullptr,
            "batch_norm backward: a residual gradient needs the fused ReLU's mask");
  // Reduction pass reads gradOut and the input, the second pass both again and writes gradIn
  // (a fused ReLU's mask is 1/32 of that; its input gradient is one more write).
  const double values = static_cast<double>(shape.n * shape.c * shape.hw);
  const bool fused = epilogue.reluMask != nullptr;
  const profile::Scope scope("batchnorm.backward", 8.0 * values,
                             (epilogue.gradResidual != nullptr ? 24.0 : 20.0) * values);
  const BatchNormShape& s = shape;
  const int64_t count = s.n * s.hw;
  const int64_t words = reluMaskWords(s.hw);
  const bool needGradIn = gradIn != nullptr || epilogue.gradResidual != nullptr;
  std::vector<kernels::BatchNormGrad> k(needGradIn ? static_cast<size_t>(s.c) : 0);
  parallelFor(s.c, 1, [&](int64_t c0, int64_t c1) {
    // Per channel, sum dy and sum dy * (x - mean) over the images in order; an image's planes
    // of this thread's channels lie next to each other, so the pass reads one stream per image.
    std::vector<double> sums(static_cast<size_t>(2 * (c1 - c0)), 0.0);
    for (int64_t n = 0; n < s.n; ++n) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t plane = n * s.c + c;
        float planeG = 0.0f, planeGX = 0.0f;
        detail::sumAndDotDeviation(gradOut + plane * s.hw, fused ? epilogue.reluMask + plane * words : nullptr,
                                   in + plane * s.hw, saveMean[c], s.hw, planeG, planeGX);
        sums[static_cast<size_t>(2 * (c - c0))] += planeG;
        sums[static_cast<size_t>(2 * (c - c0) + 1)] += planeGX;
      }
    }
    for (int64_t c = c0; c < c1; ++c) {
      const float mean = saveMean[c];
      const double sumG = sums[static_cast<size_t>(2 * (c - c0))], sumGX = sums[static_cast<size_t>(2 * (c - c0) + 1)];
      if (gradBeta != nullptr) gradBeta[c] = kernels::batchNormGradBeta(sumG);
      if (gradGamma != nullptr) gradGamma[c] = kernels::batchNormGradGamma(sumGX, saveInvStd[c]);
      if (needGradIn) {
        k[static_cast<size_t>(c)] = kernels::batchNormGrad(sumG, sumGX, count, gamma, c, mean, saveInvStd[c]);
      }
    }
  });
  if (!needGradIn) return;
  // Planes in memory order: unit-stride streams.
  parallelFor(s.n * s.c, planeGrain(s), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      gradInPlane(gradIn != nullptr ? gradIn + p * s.hw : nullptr,
                  epilogue.gradResidual != nullptr ? epilogue.gradResidual + p * s.hw : nullptr, gradOut + p * s.hw,
                  fused ? epilogue.reluMask + p * words : nullptr, in + p * s.hw, k[static_cast<size_t>(p % s.c)],
                  s.hw);
    }
  });
}

}  // namespace aps::cpu
