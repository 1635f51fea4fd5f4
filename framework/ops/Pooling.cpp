#include "framework/ops/Pooling.h"

#include "framework/autograd/Function.h"
#include "framework/ops/Backend.h"
#include "framework/ops/Checks.h"
#include "framework/ops/cpu/Kernels.h"

namespace aps::ops {

namespace {
cpu::Pool2dShape poolShape(const char* op, const Tensor& x, const Pool2dOptions& o) {
  checkFloat(op, "input", x);
  checkRank(op, "input", x, 4);
  cpu::Pool2dShape s;
  s.n = x.size(0);
  s.c = x.size(1);
  s.h = x.size(2);
  s.w = x.size(3);
  s.kernelH = o.kernelH;
  s.kernelW = o.kernelW;
  s.strideH = o.strideH == 0 ? o.kernelH : o.strideH;
  s.strideW = o.strideW == 0 ? o.kernelW : o.strideW;
  s.padH = o.padH;
  s.padW = o.padW;
  APS_CHECK(s.kernelH >= 1 && s.kernelW >= 1, "{}: kernel must be >= 1, got ({}, {})", op, s.kernelH, s.kernelW);
  APS_CHECK(s.strideH >= 1 && s.strideW >= 1, "{}: stride must be >= 1, got ({}, {})", op, o.strideH, o.strideW);
  APS_CHECK(s.padH >= 0 && s.padW >= 0, "{}: padding must be >= 0, got ({}, {})", op, s.padH, s.padW);
  APS_CHECK(2 * s.padH <= s.kernelH && 2 * s.padW <= s.kernelW,
            "{}: padding ({}, {}) must be at most half the kernel ({}, {})", op, s.padH, s.padW, s.kernelH, s.kernelW);
  APS_CHECK(s.h + 2 * s.padH >= s.kernelH && s.w + 2 * s.padW >= s.kernelW,
            "{}: input shape {} is smaller than the kernel ({}, {}) with padding ({}, {})", op, x.shapeString(),
            s.kernelH, s.kernelW, s.padH, s.padW);
  return s;
}
}  // namespace

Tensor maxPool2d(const Tensor& x, const Pool2dOptions& options) {
  const cpu::Pool2dShape s = poolShape("maxPool2d", x, options);
  const Backend& backend = backendFor("maxPool2d", {&x});
  const Tensor cx = x.contiguous();
  Tensor out = Tensor::empty({s.n, s.c, s.outH(), s.outW()}, DType::Float32, x.device());
  Tensor argmax = Tensor::empty(out.sizes(), DType::Int64, x.device());
  backend.maxPool2dForward(out.data<float>(), argmax.data<int64_t>(), cx.data<float>(), s);
  return autograd::recordFunction(out, "MaxPool2dBackward", {x}, [s, argmax, &backend](const Tensor& gIn) {
    const Tensor g = gIn.contiguous();
    Tensor gx = Tensor::empty({s.n, s.c, s.h, s.w}, DType::Float32, g.device());
    backend.maxPool2dBackward(gx.data<float>(), g.data<float>(), argmax.data<int64_t>(), s);
    return std::vector<Tensor>{gx};
  });
}

Tensor avgPool2d(const Tensor& x, const Pool2dOptions& options, bool countIncludePad) {
  const cpu::Pool2dShape s = poolShape("avgPool2d", x, options);
  const Backend& backend = backendFor("avgPool2d", {&x});
  const Tensor cx = x.contiguous();
  Tensor out = Tensor::empty({s.n, s.c, s.outH(), s.outW()}, DType::Float32, x.device());
  backend.avgPool2dForward(out.data<float>(), cx.data<float>(), s, countIncludePad);
  return autograd::recordFunction(out, "AvgPool2dBackward", {x}, [s, countIncludePad, &backend](const Tensor& gIn) {
    const Tensor g = gIn.contiguous();
    Tensor gx = Tensor::empty({s.n, s.c, s.h, s.w}, DType::Float32, g.device());
    backend.avgPool2dBackward(gx.data<float>(), g.data<float>(), s, countIncludePad);
    return std::vector<Tensor>{gx};
  });
}

Tensor adaptiveAvgPool2d(const Tensor& x, int64_t outH, int64_t outW) {
  checkFloat("adaptiveAvgPool2d", "input", x);
  checkRank("adaptiveAvgPool2d", "input", x, 4);
  APS_CHECK(outH >= 1 && outW >= 1, "adaptiveAvgPool2d: output size must be >= 1, got ({}, {})", outH, outW);
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  APS_CHECK(h >= 1 && w >= 1, "adaptiveAvgPool2d: input shape {} is empty", x.shapeString());
  const Backend& backend = backendFor("adaptiveAvgPool2d", {&x});
  const Tensor cx = x.contiguous();
  Tensor out = Tensor::empty({n, c, outH, outW}, DType::Float32, x.device());
  backend.adaptiveAvgPool2dForward(out.data<float>(), cx.data<float>(), n, c, h, w, outH, outW);
  return autograd::recordFunction(out, "AdaptiveAvgPool2dBackward", {x}, [=, &backend](const Tensor& gIn) {
    const Tensor g = gIn.contiguous();
    Tensor gx = Tensor::empty({n, c, h, w}, DType::Float32, g.device());
    backend.adaptiveAvgPool2dBackward(gx.data<float>(), g.data<float>(), n, c, h, w, outH, outW);
    return std::vector<Tensor>{gx};
  });
}

}  // namespace aps::ops
