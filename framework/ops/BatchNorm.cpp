#include "framework/ops/BatchNorm.h"

#include "framework/autograd/Function.h"
#include "framework/core/Parallel.h"
#include "framework/ops/Checks.h"
#include "framework/ops/cpu/Kernels.h"

#include <algorithm>
#include <cmath>

namespace aps::ops {

namespace {
void checkChannelVector(const char* arg, const Tensor& t, int64_t channels) {
  checkFloat("batchNorm2d", arg, t);
  APS_CHECK(t.dim() == 1 && t.size(0) == channels && t.isContiguous(),
            "batchNorm2d: {} shape {} does not match {} channels", arg, t.shapeString(), channels);
}

// Eval-mode backward: the op is a per-channel affine map y = x * a + b with
// a = gamma / sqrt(var + eps), so dx = g * a, dgamma = sum g * xhat, dbeta = sum g.
std::vector<Tensor> evalBackward(const Tensor& g, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& var, float eps, bool gx, bool gg, bool gb) {
  const int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  Tensor dx = gx ? Tensor::empty(x.sizes()) : Tensor();
  Tensor dgamma = gg ? Tensor::empty({c}) : Tensor();
  Tensor dbeta = gb ? Tensor::empty({c}) : Tensor();
  const float* pg = g.data<float>();
  const float* px = x.data<float>();
  const float* pGamma = gamma.data<float>();
  const float* pMean = mean.data<float>();
  const float* pVar = var.data<float>();
  float* pdx = gx ? dx.data<float>() : nullptr;
  parallelFor(c, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(n * hw, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      const float invStd = 1.0f / std::sqrt(pVar[ch] + eps);
      const float scale = pGamma[ch] * invStd;
      const float mu = pMean[ch];
      double sumG = 0.0, sumGx = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t base = (i * c + ch) * hw;
        for (int64_t j = 0; j < hw; ++j) {
          const float gv = pg[base + j];
          sumG += gv;
          sumGx += static_cast<double>(gv) * (px[base + j] - mu) * invStd;
          if (pdx) pdx[base + j] = gv * scale;
        }
      }
      if (gg) dgamma.data<float>()[ch] = static_cast<float>(sumGx);
      if (gb) dbeta.data<float>()[ch] = static_cast<float>(sumG);
    }
  });
  return {dx, dgamma, dbeta};
}
}  // namespace

Tensor batchNorm2d(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& runningMean, Tensor& runningVar,
                   bool training, float momentum, float eps) {
  checkFloat("batchNorm2d", "input", x);
  checkRank("batchNorm2d", "input", x, 4);
  const int64_t c = x.size(1);
  checkChannelVector("gamma", gamma, c);
  checkChannelVector("beta", beta, c);
  checkChannelVector("running mean", runningMean, c);
  checkChannelVector("running var", runningVar, c);
  APS_CHECK(eps > 0.0f, "batchNorm2d: eps must be positive, got {}", eps);
  APS_CHECK(momentum >= 0.0f && momentum <= 1.0f, "batchNorm2d: momentum must be in [0, 1], got {}", momentum);
  cpu::BatchNormShape s{x.size(0), c, x.size(2) * x.size(3)};
  if (training) {
    APS_CHECK(s.n * s.hw > 1, "batchNorm2d: training needs more than one value per channel, got input shape {}",
              x.shapeString());
  }
  const Tensor cx = x.contiguous().detach(), cg = gamma.detach(), cb = beta.detach();
  Tensor out = Tensor::empty(x.sizes());
  const bool gx = x.requiresGrad(), gg = gamma.requiresGrad(), gb = beta.requiresGrad();
  if (training) {
    Tensor saveMean = Tensor::empty({c}), saveInvStd = Tensor::empty({c});
    cpu::batchNormForwardTrain(out.data<float>(), saveMean.data<float>(), saveInvStd.data<float>(),
                               runningMean.data<float>(), runningVar.data<float>(), cx.data<float>(), cg.data<float>(),
                               cb.data<float>(), s, momentum, eps);
    return autograd::recordFunction(out, "BatchNorm2dBackward", {x, gamma, beta}, [=](const Tensor& gIn) {
      const Tensor g = gIn.contiguous();
      std::vector<Tensor> grads{gx ? Tensor::empty(cx.sizes()) : Tensor(), gg ? Tensor::empty({c}) : Tensor(),
                                gb ? Tensor::empty({c}) : Tensor()};
      cpu::batchNormBackward(gx ? grads[0].data<float>() : nullptr, gg ? grads[1].data<float>() : nullptr,
                             gb ? grads[2].data<float>() : nullptr, g.data<float>(), cx.data<float>(), cg.data<float>(),
                             saveMean.data<float>(), saveInvStd.data<float>(), s);
      return grads;
    });
  }
  cpu::batchNormForwardEval(out.data<float>(), cx.data<float>(), cg.data<float>(), cb.data<float>(),
                            runningMean.data<float>(), runningVar.data<float>(), s, eps);
  // Backward in eval mode uses the statistics as they were in this forward pass.
  const Tensor mean = runningMean.clone(), var = runningVar.clone();
  return autograd::recordFunction(out, "BatchNorm2dEvalBackward", {x, gamma, beta}, [=](const Tensor& gIn) {
    return evalBackward(gIn.contiguous(), cx, cg, mean, var, eps, gx, gg, gb);
  });
}

}  // namespace aps::ops
