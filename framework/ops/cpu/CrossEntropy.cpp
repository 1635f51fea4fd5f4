// Softmax cross-entropy over dim 1 with label smoothing (Szegedy et al., "Rethinking the
// Inception Architecture", 2016) as torch.nn.functional.cross_entropy defines it:
//   loss = (1 - eps) * nll + eps / C * sum_c (-log p_c), averaged over non-ignored targets.
// Each image's positions are summed in order in double and the images' sums are combined
// in order, so the loss does not depend on the thread count.
#include "framework/ops/kernels/CrossEntropy.h"
#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/core/Profile.h"
#include "framework/ops/cpu/Kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace aps::cpu {

namespace {

// Positions of one image handled together: the class loop runs outside, the position
// loop inside, so per-pixel logits (stride `spatial` between classes) vectorise.
constexpr int64_t kPositionBlock = 256;

void checkShape(const CrossEntropyShape& s) {
  APS_CHECK(s.n >= 1 && s.c >= 1 && s.spatial >= 1, "cross_entropy: sizes must be positive (n={}, c={}, spatial={})",
            s.n, s.c, s.spatial);
}

// Throws naming the first target outside [0, C) that is not the ignore index; returns the
// number of targets that count.
int64_t checkTargets(const int64_t* targets, const CrossEntropyShape& s, int64_t ignoreIndex) {
  int64_t counted = 0;
  const int64_t total = s.n * s.spatial;
  for (int64_t i = 0; i < total; ++i) {
    const int64_t t = targets[i];
    if (t == ignoreIndex) continue;
    APS_CHECK(t >= 0 && t < s.c,
              "cross_entropy: target {} at position {} is outside [0, {}) and not the ignore index {}", t, i, s.c,
              ignoreIndex);
    ++counted;
  }
  return counted;
}

}  // namespace

float crossEntropyForward(float* probs, const float* logits, const int64_t* targets, const CrossEntropyShape& shape,
                          float labelSmoothing, int64_t ignoreIndex) {
  checkShape(shape);
  const profile::Scope scope("loss.forward", 0.0, 8.0 * static_cast<double>(shape.n * shape.c * shape.spatial));
  const CrossEntropyShape& s = shape;
  const int64_t counted = checkTargets(targets, s, ignoreIndex);
  std::vector<double> imageLoss(static_cast<size_t>(s.n), 0.0);
  const float eps = labelSmoothing;
  const float invC = 1.0f / static_cast<float>(s.c);
  parallelFor(s.n, 1, [&](int64_t n0, int64_t n1) {
    float maxLogit[kPositionBlock], sumExp[kPositionBlock], sumLogit[kPositionBlock];
    for (int64_t n = n0; n < n1; ++n) {
      double loss = 0.0;
      for (int64_t s0 = 0; s0 < s.spatial; s0 += kPositionBlock) {
        const int64_t m = std::min(kPositionBlock, s.spatial - s0);
        const float* x = logits + n * s.c * s.spatial + s0;
        float* p = probs + n * s.c * s.spatial + s0;
        std::fill(maxLogit, maxLogit + m, -std::numeric_limits<float>::infinity());
        std::fill(sumExp, sumExp + m, 0.0f);
        std::fill(sumLogit, sumLogit + m, 0.0f);
        for (int64_t c = 0; c < s.c; ++c) {
          const float* xc = x + c * s.spatial;
          for (int64_t i = 0; i < m; ++i) kernels::logitStats(xc[i], maxLogit[i], sumLogit[i]);
        }
        for (int64_t c = 0; c < s.c; ++c) {
          const float* xc = x + c * s.spatial;
          float* pc = p + c * s.spatial;
          for (int64_t i = 0; i < m; ++i) {
            pc[i] = kernels::softmaxNumerator(xc[i], maxLogit[i]);
            sumExp[i] += pc[i];
          }
        }
        for (int64_t i = 0; i < m; ++i) sumExp[i] = 1.0f / sumExp[i];
        for (int64_t c = 0; c < s.c; ++c) {
          float* pc = p + c * s.spatial;
          for (int64_t i = 0; i < m; ++i) pc[i] *= sumExp[i];
        }
        for (int64_t i = 0; i < m; ++i) {
          const int64_t t = targets[n * s.spatial + s0 + i];
          if (t == ignoreIndex) continue;
          // sumExp now holds the reciprocal of the sum.
          loss += kernels::crossEntropyAt(maxLogit[i], sumExp[i], x[t * s.spatial + i], sumLogit[i], invC, eps);
        }
      }
      imageLoss[static_cast<size_t>(n)] = loss;
    }
  });
  if (counted == 0) return 0.0f;
  double total = 0.0;
  for (double l : imageLoss) total += l;
  return static_cast<float>(total / static_cast<double>(counted));
}

void crossEntropyBackward(float* gradLogits, const float* probs, const int64_t* targets, const CrossEntropyShape& shape,
                          float labelSmoothing, int64_t ignoreIndex, float gradLoss) {
  checkShape(shape);
  const profile::Scope scope("loss.backward", 0.0, 8.0 * static_cast<double>(shape.n * shape.c * shape.spatial));
  const CrossEntropyShape& s = shape;
  const int64_t counted = checkTargets(targets, s, ignoreIndex);
  const kernels::CrossEntropyGrad k = kernels::crossEntropyGrad(counted, gradLoss, labelSmoothing, s.c);
  parallelFor(s.n, 1, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const int64_t* t = targets + n * s.spatial;
      for (int64_t c = 0; c < s.c; ++c) {
        const float* p = probs + (n * s.c + c) * s.spatial;
        float* g = gradLogits + (n * s.c + c) * s.spatial;
        for (int64_t i = 0; i < s.spatial; ++i) g[i] = kernels::crossEntropyGradAt(p[i], t[i], c, ignoreIndex, k);
      }
    }
  });
}

}  // namespace aps::cpu
