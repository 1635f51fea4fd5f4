#include "framework/ops/Conv.h"

#include "framework/autograd/Function.h"
#include "framework/ops/Autocast.h"
#include "framework/ops/Backend.h"
#include "framework/ops/Checks.h"
#include "framework/ops/cpu/Kernels.h"

namespace aps::ops {

Tensor conv2d(const Tensor& xIn, const Tensor& weightIn, const Tensor& biasIn, const Conv2dOptions& o) {
  const Tensor x = autocastInput(xIn), weight = autocastInput(weightIn), bias = autocastInput(biasIn);
  checkFloat("conv2d", "input", x);
  checkFloat("conv2d", "weight", weight);
  checkRank("conv2d", "input", x, 4);
  checkRank("conv2d", "weight", weight, 4);
  APS_CHECK(o.strideH >= 1 && o.strideW >= 1, "conv2d: stride must be >= 1, got ({}, {})", o.strideH, o.strideW);
  APS_CHECK(o.padH >= 0 && o.padW >= 0, "conv2d: padding must be >= 0, got ({}, {})", o.padH, o.padW);
  APS_CHECK(o.dilationH >= 1 && o.dilationW >= 1, "conv2d: dilation must be >= 1, got ({}, {})", o.dilationH,
            o.dilationW);
  APS_CHECK(o.groups >= 1, "conv2d: groups must be >= 1, got {}", o.groups);
  cpu::Conv2dShape s;
  s.n = x.size(0);
  s.c = x.size(1);
  s.h = x.size(2);
  s.w = x.size(3);
  s.k = weight.size(0);
  s.r = weight.size(2);
  s.s = weight.size(3);
  s.strideH = o.strideH;
  s.strideW = o.strideW;
  s.padH = o.padH;
  s.padW = o.padW;
  s.dilationH = o.dilationH;
  s.dilationW = o.dilationW;
  s.groups = o.groups;
  APS_CHECK(s.c % o.groups == 0 && s.k % o.groups == 0,
            "conv2d: input channels {} and output channels {} must be divisible by groups {}", s.c, s.k, o.groups);
  APS_CHECK(weight.size(1) * o.groups == s.c,
            "conv2d: input shape {} has {} channels but weight shape {} with groups {} expects {}", x.shapeString(),
            s.c, weight.shapeString(), o.groups, weight.size(1) * o.groups);
  if (bias.defined()) {
    checkFloat("conv2d", "bias", bias);
    APS_CHECK(bias.dim() == 1 && bias.size(0) == s.k, "conv2d: bias shape {} does not match {} output channels",
              bias.shapeString(), s.k);
  }
  APS_CHECK(s.outH() >= 1 && s.outW() >= 1,
            "conv2d: input shape {} is too small for weight shape {} (padding ({}, {}), dilation ({}, {})): output "
            "would be {}x{}",
            x.shapeString(), weight.shapeString(), o.padH, o.padW, o.dilationH, o.dilationW, s.outH(), s.outW());

  const Backend& backend = backendFor("conv2d", {&x, &weight, &bias});
  const Tensor cx = x.contiguous().detach(), cw = weight.contiguous().detach();
  const Tensor cb = bias.defined() ? bias.contiguous().detach() : Tensor();
  Tensor out = Tensor::empty({s.n, s.k, s.outH(), s.outW()}, DType::Float32, x.device());
  backend.conv2dForward(out.data<float>(), cx.data<float>(), cw.data<float>(), cb.defined() ? cb.data<float>() : nullptr,
                     s);
  const bool gx = x.requiresGrad(), gw = weight.requiresGrad(), gb = bias.defined() && bias.requiresGrad();
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  const size_t count = inputs.size();
  return autograd::recordFunction(out, "Conv2dBackward", inputs, [=, &backend](const Tensor& gIn) {
    const Tensor g = gIn.contiguous();
    const Device device = cx.device();
    std::vector<Tensor> grads(count);
    if (gx) grads[0] = Tensor::empty(cx.sizes(), DType::Float32, device);
    if (gw) grads[1] = Tensor::empty(cw.sizes(), DType::Float32, device);
    if (gb) grads[2] = Tensor::empty({s.k}, DType::Float32, device);
    backend.conv2dBackward(gx ? grads[0].data<float>() : nullptr, gw ? grads[1].data<float>() : nullptr,
                        gb ? grads[2].data<float>() : nullptr, g.data<float>(), cx.data<float>(), cw.data<float>(), s);
    return grads;
  });
}

}  // namespace aps::ops
