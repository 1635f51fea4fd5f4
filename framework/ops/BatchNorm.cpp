#include "framework/ops/BatchNorm.h"

#include "framework/autograd/ComputePrecision.h"
#include "framework/autograd/Function.h"
#include "framework/autograd/GradAccumulation.h"
#include "framework/core/Parallel.h"
#include "framework/ops/Backend.h"
#include "framework/ops/Checks.h"
#include "framework/ops/Elementwise.h"
#include "framework/ops/cpu/Kernels.h"

#include <algorithm>
#include <cmath>
#include <memory>

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

// The arguments' checks; returns the kernels' shape.
cpu::BatchNormShape checkBatchNormArgs(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                       const Tensor& runningMean, const Tensor& runningVar, bool training,
                                       float momentum, float eps) {
  checkFloat("batchNorm2d", "input", x);
  checkRank("batchNorm2d", "input", x, 4);
  const int64_t c = x.size(1);
  checkChannelVector("gamma", gamma, c);
  checkChannelVector("beta", beta, c);
  checkChannelVector("running mean", runningMean, c);
  checkChannelVector("running var", runningVar, c);
  APS_CHECK(eps > 0.0f, "batchNorm2d: eps must be positive, got {}", eps);
  APS_CHECK(momentum >= 0.0f && momentum <= 1.0f, "batchNorm2d: momentum must be in [0, 1], got {}", momentum);
  const cpu::BatchNormShape s{x.size(0), c, x.size(2) * x.size(3)};
  if (training) {
    APS_CHECK(s.n * s.hw > 1, "batchNorm2d: training needs more than one value per channel, got input shape {}",
              x.shapeString());
  }
  return s;
}

// Batch norm with an optional fused epilogue (cpu::BatchNormEpilogue): relu(bn(x) + residual).
Tensor batchNormOp(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& runningMean, Tensor& runningVar,
                   bool training, float momentum, float eps, const Tensor& residual, bool relu) {
  const cpu::BatchNormShape s = checkBatchNormArgs(x, gamma, beta, runningMean, runningVar, training, momentum, eps);
  const int64_t c = s.c;
  APS_ASSERT((training || !relu) && (relu || !residual.defined()));  // batchNorm2dRelu's cases
  const Backend& backend = backendFor("batchNorm2d", {&x, &gamma, &beta, &runningMean, &runningVar, &residual});
  APS_ASSERT(backend.fusedBatchNorm() || !relu);
  const Tensor cx = x.contiguous().detach(), cg = gamma.detach(), cb = beta.detach();
  const Tensor cr = residual.defined() ? residual.contiguous().detach() : Tensor();
  const Device device = x.device();
  const bool gx = x.requiresGrad(), gg = gamma.requiresGrad(), gb = beta.requiresGrad();
  const bool gr = residual.defined() && residual.requiresGrad();
  std::vector<Tensor> inputs{x, gamma, beta};
  if (residual.defined()) inputs.push_back(residual);
  Tensor out = Tensor::empty(x.sizes(), DType::Float32, device);
  if (training) {
    // ReLU's backward needs only its mask, out > 0, a bit per value.
    const autograd::ComputePrecision precision = autograd::ComputePrecision::current();
    const bool saveMask = relu && autograd::needsGrad(inputs);
    const std::shared_ptr<uint16_t[]> mask(saveMask ? new uint16_t[s.n * s.c * cpu::reluMaskWords(s.hw)] : nullptr);
    // A 16-bit compute precision rounds the output after the kernel: the mask is taken then.
    const cpu::BatchNormEpilogue epilogue{cr.defined() ? cr.data<float>() : nullptr, relu,
                                          precision.isFp32() ? mask.get() : nullptr};
    Tensor saveMean = Tensor::empty({c}, DType::Float32, device), saveInvStd = Tensor::empty({c}, DType::Float32, device);
    backend.batchNormForwardTrain(out.data<float>(), saveMean.data<float>(), saveInvStd.data<float>(),
                               runningMean.data<float>(), runningVar.data<float>(), cx.data<float>(), cg.data<float>(),
                               cb.data<float>(), s, momentum, eps, epilogue);
    const size_t gradients = inputs.size();
    autograd::recordFunction(
        out, relu ? "BatchNorm2dReluBackward" : "BatchNorm2dBackward", inputs, [=, &backend](const Tensor& gIn) {
          // The residual's gradient is gIn under the ReLU's mask: where nothing else sees gIn,
          // the kernel masks it in place and it is handed on, not copied into a new tensor.
          const bool maskInPlace = gr && autograd::writableInPlace(gIn);
          const Tensor g = gIn.contiguous();
          auto empty = [&](const Shape& shape) { return Tensor::empty(shape, DType::Float32, device); };
          std::vector<Tensor> grads{gx ? empty(cx.sizes()) : Tensor(), gg ? empty({c}) : Tensor(),
                                    gb ? empty({c}) : Tensor()};
          grads.resize(gradients);
          if (gr) grads[3] = maskInPlace ? g : empty(cx.sizes());
          const cpu::BatchNormGradEpilogue gradEpilogue{mask.get(), gr ? grads[3].data<float>() : nullptr};
          backend.batchNormBackward(gx ? grads[0].data<float>() : nullptr, gg ? grads[1].data<float>() : nullptr,
                                 gb ? grads[2].data<float>() : nullptr, g.data<float>(), cx.data<float>(),
                                 cg.data<float>(), saveMean.data<float>(), saveInvStd.data<float>(), s, gradEpilogue);
          return grads;
        });
    // The separate ReLU's gradient would be rounded to batch norm's output format, which the
    // gradients reaching this node already are, except a root's (16-bit compute).
    if (relu && !precision.isFp32() && out.requiresGrad()) out.impl().autograd().gradFn->setRoundsRootGradient();
    if (saveMask && !precision.isFp32()) cpu::reluMask(mask.get(), out.data<float>(), s);
    return out;
  }
  APS_ASSERT(!residual.defined());
  backend.batchNormForwardEval(out.data<float>(), cx.data<float>(), cg.data<float>(), cb.data<float>(),
                            runningMean.data<float>(), runningVar.data<float>(), s, eps);
  // Backward in eval mode uses the statistics as they were in this forward pass.
  const Tensor mean = runningMean.clone(), var = runningVar.clone();
  return autograd::recordFunction(out, "BatchNorm2dEvalBackward", inputs, [=](const Tensor& gIn) {
    if (device.isCpu()) return evalBackward(gIn.contiguous(), cx, cg, mean, var, eps, gx, gg, gb);
    // Backward through eval-mode batch norm (frozen statistics) is rare: on a GPU it runs on
    // the host and its gradients go back to the device.
    const Device cpu = Device::cpu();
    std::vector<Tensor> grads =
        evalBackward(gIn.contiguous().to(cpu), cx.to(cpu), cg.to(cpu), mean.to(cpu), var.to(cpu), eps, gx, gg, gb);
    for (Tensor& t : grads) {
      if (t.defined()) t = t.to(device);
    }
    return grads;
  });
}
}  // namespace

Tensor batchNorm2d(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& runningMean, Tensor& runningVar,
                   bool training, float momentum, float eps) {
  return batchNormOp(x, gamma, beta, runningMean, runningVar, training, momentum, eps, Tensor(), false);
}

Tensor batchNorm2dRelu(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& runningMean,
                       Tensor& runningVar, bool training, float momentum, float eps, const Tensor& residual) {
  // The add fuses only where it is the same arithmetic: fp32 (no rounding of batch norm's
  // output before it), a float residual of x's shape (no broadcast).
  const bool fuseAdd = residual.defined() && autograd::ComputePrecision::current().isFp32() &&
                       residual.dtype() == DType::Float32 && residual.sizes() == x.sizes();
  const bool fused = backendFor("batchNorm2dRelu", {&x, &residual}).fusedBatchNorm();
  if (!training || !fused || (residual.defined() && !fuseAdd)) {
    Tensor y = batchNorm2d(x, gamma, beta, runningMean, runningVar, training, momentum, eps);
    return relu(residual.defined() ? add(y, residual) : y);
  }
  return batchNormOp(x, gamma, beta, runningMean, runningVar, training, momentum, eps, residual, true);
}

}  // namespace aps::ops
