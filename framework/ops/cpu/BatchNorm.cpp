// Batch normalisation (Ioffe & Szegedy, 2015) over (N, C, H*W), with PyTorch's running
// statistics: biased variance to normalise, unbiased variance in the running average.
// Every pass runs over the (n, c) planes in memory order, split over the threads by images,
// as the convolutions around it split their work, so a thread mostly reads what its own
// cache holds. The reductions compute each plane's lane sum (kernels/Reduce.h's order) and
// then, per channel, add the planes' sums over the images in order in double, so no result
// depends on the thread count; the element-wise passes (the normalisation with its fused
// ReLU and residual add, the input gradient) are unit-stride streams that the hardware
// prefetches.
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

// Planes per parallel chunk of a pass over the planes: about 16 K values.
int64_t planeGrain(const BatchNormShape& s) { return std::max<int64_t>(1, (int64_t{1} << 14) / s.hw); }

// fn(p, c) for every (n, c) plane p = n * C + c, the planes split over the threads in memory
// order: unit-stride streams that the hardware prefetches, each thread's share a run of
// whole images.
template <typename Fn>
void forEachPlane(const BatchNormShape& s, const Fn& fn) {
  parallelFor(s.n * s.c, planeGrain(s), [&](int64_t p0, int64_t p1) {
    int64_t c = p0 % s.c;
    for (int64_t p = p0; p < p1; ++p) {
      fn(p, c);
      if (++c == s.c) c = 0;
    }
  });
}

// Channel c's plane sums (planeSums[n * C + c]) added over the images in order, in double.
double sumOverImages(const std::vector<float>& planeSums, int64_t c, const BatchNormShape& s) {
  double total = 0.0;
  for (int64_t n = 0; n < s.n; ++n) total += planeSums[static_cast<size_t>(n * s.c + c)];
  return total;
}

// out = epilogue(in * scale + shift) over the plane p with its channel's map m.
void affinePlane(float* out, const float* in, kernels::BatchNormAffine m, int64_t p, const BatchNormShape& s,
                 const BatchNormEpilogue& e) {
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
  if (e.reluMask != nullptr) detail::simd::positiveBits(e.reluMask + p * reluMaskWords(s.hw), y, s.hw);
}

// One plane of batch norm's input gradient, dx = batchNormGradIn(dy, x, k), where dy is
// gradOut masked by a fused ReLU's bits (bits null: no ReLU); dy itself goes to gradRelu
// (when not null: the residual's gradient). On AVX-512 the mask applies in registers and
// dx is batchNormGradIn's arithmetic, one negated fused multiply-add
// (tests/ops/cpu/SharedKernelsTest.cpp holds both to a scalar reference).
void gradInPlane(float* dx, float* gradRelu, const float* gradOut, const uint16_t* bits, const float* x,
                 kernels::BatchNormGrad k, int64_t hw) {
#if defined(APS_SIMD_AVX512)
  const __m512 mean = _mm512_set1_ps(k.mean), meanG = _mm512_set1_ps(k.meanG);
  const __m512 projection = _mm512_set1_ps(k.projection), scale = _mm512_set1_ps(k.scale);
  const auto dxOf = [&](__m512 g, __m512 xv) {
    return _mm512_mul_ps(_mm512_fnmadd_ps(_mm512_sub_ps(xv, mean), projection, _mm512_sub_ps(g, meanG)), scale);
  };
  int64_t i = 0;
  // Whole steps with plain loads and stores (the ReLU's bits applied in registers), then one
  // masked step: masked loads and stores in every step are slow on some CPUs (AMD Zen 4).
  for (; i + 16 <= hw; i += 16) {
    const __m512 all = _mm512_loadu_ps(gradOut + i);
    const __m512 g = bits != nullptr ? _mm512_maskz_mov_ps(bits[i / 16], all) : all;
    if (gradRelu != nullptr) _mm512_storeu_ps(gradRelu + i, g);
    if (dx != nullptr) _mm512_storeu_ps(dx + i, dxOf(g, _mm512_loadu_ps(x + i)));
  }
  if (i < hw) {
    const auto lanes = static_cast<__mmask16>((1u << (hw - i)) - 1u);
    const __mmask16 on = bits != nullptr ? static_cast<__mmask16>(lanes & bits[i / 16]) : lanes;
    const __m512 g = _mm512_maskz_loadu_ps(on, gradOut + i);
    if (gradRelu != nullptr) _mm512_mask_storeu_ps(gradRelu + i, lanes, g);
    if (dx != nullptr) _mm512_mask_storeu_ps(dx + i, lanes, dxOf(g, _mm512_maskz_loadu_ps(lanes, x + i)));
  }
#else
  for (int64_t i = 0; i < hw; ++i) {
    const float g = bits == nullptr || detail::simd::positiveBit(bits, i) ? gradOut[i] : 0.0f;
    if (gradRelu != nullptr) gradRelu[i] = g;
    if (dx != nullptr) dx[i] = kernels::batchNormGradIn(g, x[i], k);
  }
#endif
}

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
  const int64_t planes = s.n * s.c;
  // Each reduction: every plane's lane sum (forEachPlane), then per channel sumOverImages.
  std::vector<float> planeSums(static_cast<size_t>(planes));
  std::vector<float> mean(static_cast<size_t>(s.c));
  forEachPlane(s, [&](int64_t p, int64_t) { planeSums[static_cast<size_t>(p)] = detail::sum(in + p * s.hw, s.hw); });
  for (int64_t c = 0; c < s.c; ++c) {
    mean[static_cast<size_t>(c)] = kernels::batchNormMean(sumOverImages(planeSums, c, s), count);
  }
  // Two passes (mean, then squared deviations) avoid the cancellation of E[x^2] - E[x]^2.
  forEachPlane(s, [&](int64_t p, int64_t c) {
    planeSums[static_cast<size_t>(p)] = detail::sumSquaredDeviation(in + p * s.hw, mean[static_cast<size_t>(c)], s.hw);
  });
  std::vector<kernels::BatchNormAffine> a(static_cast<size_t>(s.c));
  for (int64_t c = 0; c < s.c; ++c) {
    const float m = mean[static_cast<size_t>(c)];
    const double squares = sumOverImages(planeSums, c, s);
    const float invStd = kernels::batchNormInvStd(squares, count, eps);
    if (saveMean != nullptr) saveMean[c] = m;
    if (saveInvStd != nullptr) saveInvStd[c] = invStd;
    if (runningMean != nullptr) runningMean[c] = kernels::runningStatUpdate(runningMean[c], m, momentum);
    if (runningVar != nullptr) {
      runningVar[c] =
          kernels::runningStatUpdate(runningVar[c], kernels::batchNormUnbiasedVar(squares, count), momentum);
    }
    a[static_cast<size_t>(c)] = kernels::batchNormAffine(gamma, beta, c, m, invStd);
  }
  forEachPlane(s, [&](int64_t p, int64_t c) { affinePlane(out, in, a[static_cast<size_t>(c)], p, s, epilogue); });
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
  forEachPlane(s, [&](int64_t p, int64_t c) { affinePlane(out, in, a[static_cast<size_t>(c)], p, s, {}); });
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
  // Per plane, sum dy and sum dy * (x - mean), the planes split over threads in memory order;
  // then per channel the planes' sums added over the images in order in double.
  const int64_t planes = s.n * s.c;
  std::vector<float> sumG(static_cast<size_t>(planes)), sumGX(static_cast<size_t>(planes));
  forEachPlane(s, [&](int64_t p, int64_t c) {
    detail::sumAndDotDeviation(gradOut + p * s.hw, fused ? epilogue.reluMask + p * words : nullptr, in + p * s.hw,
                               saveMean[c], s.hw, sumG[static_cast<size_t>(p)], sumGX[static_cast<size_t>(p)]);
  });
  for (int64_t c = 0; c < s.c; ++c) {
    const double g = sumOverImages(sumG, c, s), gx = sumOverImages(sumGX, c, s);
    if (gradBeta != nullptr) gradBeta[c] = kernels::batchNormGradBeta(g);
    if (gradGamma != nullptr) gradGamma[c] = kernels::batchNormGradGamma(gx, saveInvStd[c]);
    if (needGradIn) {
      k[static_cast<size_t>(c)] = kernels::batchNormGrad(g, gx, count, gamma, c, saveMean[c], saveInvStd[c]);
    }
  }
  if (!needGradIn) return;
  forEachPlane(s, [&](int64_t p, int64_t c) {
    gradInPlane(gradIn != nullptr ? gradIn + p * s.hw : nullptr,
                epilogue.gradResidual != nullptr ? epilogue.gradResidual + p * s.hw : nullptr, gradOut + p * s.hw,
                fused ? epilogue.reluMask + p * words : nullptr, in + p * s.hw, k[static_cast<size_t>(c)], s.hw);
  });
}

}  // namespace aps::cpu
