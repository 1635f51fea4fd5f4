#include "framework/ops/Linear.h"

#include "framework/autograd/Function.h"
#include "framework/core/Parallel.h"
#include "framework/core/Profile.h"
#include "framework/ops/Autocast.h"
#include "framework/ops/Backend.h"
#include "framework/ops/Checks.h"

namespace aps::ops {

Tensor linear(const Tensor& xIn, const Tensor& weightIn, const Tensor& biasIn) {
  const Tensor x = autocastInput(xIn), weight = autocastInput(weightIn), bias = autocastInput(biasIn);
  checkFloat("linear", "input", x);
  checkFloat("linear", "weight", weight);
  checkRank("linear", "input", x, 2);
  checkRank("linear", "weight", weight, 2);
  APS_CHECK(x.size(1) == weight.size(1), "linear: input shape {} does not match weight shape {} ({} vs {} features)",
            x.shapeString(), weight.shapeString(), x.size(1), weight.size(1));
  if (bias.defined()) {
    checkFloat("linear", "bias", bias);
    APS_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias shape {} does not match weight shape {}",
              bias.shapeString(), weight.shapeString());
  }
  const Backend& backend = backendFor("linear", {&x, &weight, &bias});
  const Tensor cx = x.contiguous().detach(), cw = weight.contiguous().detach();
  Tensor out = Tensor::empty({x.size(0), weight.size(0)}, DType::Float32, x.device());
  // Each of forward, backward-data and backward-weight: 2 x rows x outputs x inputs FLOPs.
  const double flops = 2.0 * static_cast<double>(x.size(0) * weight.size(0) * weight.size(1));
  const double bytes = 4.0 * static_cast<double>(cx.numel() + cw.numel() + out.numel());
  {
    const profile::Scope scope("linear.forward", flops, bytes);
    const Tensor cb = bias.defined() ? bias.contiguous() : Tensor();
    backend.linearForward(out.data<float>(), cx.data<float>(), cw.data<float>(), cb.defined() ? cb.data<float>() : nullptr,
                       x.size(0), weight.size(1), weight.size(0));
  }
  const bool gx = x.requiresGrad(), gw = weight.requiresGrad(), gb = bias.defined() && bias.requiresGrad();
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  const bool hasBias = bias.defined();
  return autograd::recordFunction(out, "LinearBackward", inputs, [=, &backend](const Tensor& gIn) {
    const Tensor g = gIn.contiguous();
    const profile::Scope scope("linear.backward", (gx ? flops : 0.0) + (gw ? flops : 0.0), bytes);
    std::vector<Tensor> grads(hasBias ? 3 : 2);
    const Device device = cx.device();
    if (gx) grads[0] = Tensor::empty(cx.sizes(), DType::Float32, device);
    if (gw) grads[1] = Tensor::empty(cw.sizes(), DType::Float32, device);
    if (gb) grads[2] = Tensor::empty({cw.size(0)}, DType::Float32, device);
    auto ptr = [](Tensor& t) { return t.defined() ? t.data<float>() : nullptr; };
    backend.linearBackward(ptr(grads[0]), ptr(grads[1]), hasBias ? ptr(grads[2]) : nullptr, g.data<float>(),
                        cx.data<float>(), cw.data<float>(), cx.size(0), cw.size(1), cw.size(0));
    return grads;
  });
}

Tensor matmul(const Tensor& aIn, const Tensor& bIn) {
  const Tensor a = autocastInput(aIn), b = autocastInput(bIn);
  checkFloat("matmul", "first input", a);
  checkFloat("matmul", "second input", b);
  checkRank("matmul", "first input", a, 2);
  checkRank("matmul", "second input", b, 2);
  APS_CHECK(a.size(1) == b.size(0), "matmul: shapes {} and {} do not match", a.shapeString(), b.shapeString());
  const Backend& backend = backendFor("matmul", {&a, &b});
  const Tensor ca = a.contiguous().detach(), cb = b.contiguous().detach();
  Tensor out = Tensor::empty({a.size(0), b.size(1)}, DType::Float32, a.device());
  backend.matmul(out.data<float>(), ca.data<float>(), cb.data<float>(), a.size(0), a.size(1), b.size(1));
  const bool ga = a.requiresGrad(), gb = b.requiresGrad();
  return autograd::recordFunction(out, "MatmulBackward", {a, b}, [=](const Tensor& gIn) {
    // The CUDA table has no transposed products yet: matmul's backward runs on the CPU.
    APS_CHECK(gIn.device().isCpu(), "matmul: backward on {} is not supported (no model uses it); use linear",
              deviceName(gIn.device()));
    const Tensor g = gIn.contiguous();
    std::vector<Tensor> grads(2);
    if (ga) grads[0] = Tensor::empty(ca.sizes());
    if (gb) grads[1] = Tensor::empty(cb.sizes());
    cpu::matmulBackward(ga ? grads[0].data<float>() : nullptr, gb ? grads[1].data<float>() : nullptr, g.data<float>(),
                        ca.data<float>(), cb.data<float>(), ca.size(0), ca.size(1), cb.size(1));
    return grads;
  });
}

}  // namespace aps::ops
