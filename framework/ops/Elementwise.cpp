#include "framework/ops/Elementwise.h"

#include "framework/autograd/Function.h"
#include "framework/ops/Backend.h"
#include "framework/core/Profile.h"
#include "framework/ops/Broadcast.h"
#include "framework/ops/Checks.h"

namespace aps::ops {

namespace {
Tensor mapUnary(const char* op, const Tensor& x, UnaryOp kind, float scalar = 0.0f) {
  const Backend& backend = backendFor(op, {&x});
  const Tensor c = x.contiguous();
  Tensor out = Tensor::empty(c.sizes(), DType::Float32, c.device());
  const profile::Scope scope("elementwise", static_cast<double>(c.numel()), 8.0 * static_cast<double>(c.numel()));
  backend.unary(kind, out.data<float>(), c.data<float>(), scalar, out.numel());
  return out;
}

Tensor mapBinary(const char* op, const Tensor& a, const Tensor& b, BinaryOp kind) {
  checkFloat(op, "first input", a);
  checkFloat(op, "second input", b);
  const Backend& backend = backendFor(op, {&a, &b});
  const Shape shape = broadcastShapes(op, a.sizes(), b.sizes());
  const Tensor ca = a.sizes() == shape ? a.contiguous() : broadcastTo(a, shape);
  const Tensor cb = b.sizes() == shape ? b.contiguous() : broadcastTo(b, shape);
  Tensor out = Tensor::empty(shape, DType::Float32, ca.device());
  const profile::Scope scope("elementwise", static_cast<double>(out.numel()), 12.0 * static_cast<double>(out.numel()));
  backend.binary(kind, out.data<float>(), ca.data<float>(), cb.data<float>(), out.numel());
  return out;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = mapBinary("add", a, b, BinaryOp::Add);
  const Shape sa = a.sizes(), sb = b.sizes();
  const bool ga = a.requiresGrad(), gb = b.requiresGrad();
  return autograd::recordFunction(out, "AddBackward", {a, b}, [=](const Tensor& g) {
    return std::vector<Tensor>{ga ? sumTo(g, sa) : Tensor(), gb ? sumTo(g, sb) : Tensor()};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = mapBinary("sub", a, b, BinaryOp::Sub);
  const Shape sa = a.sizes(), sb = b.sizes();
  const bool ga = a.requiresGrad(), gb = b.requiresGrad();
  return autograd::recordFunction(out, "SubBackward", {a, b}, [=](const Tensor& g) {
    return std::vector<Tensor>{ga ? sumTo(g, sa) : Tensor(), gb ? neg(sumTo(g, sb)) : Tensor()};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = mapBinary("mul", a, b, BinaryOp::Mul);
  const bool ga = a.requiresGrad(), gb = b.requiresGrad();
  const Tensor sa = a.detach(), sb = b.detach();
  return autograd::recordFunction(out, "MulBackward", {a, b}, [=](const Tensor& g) {
    return std::vector<Tensor>{ga ? sumTo(mul(g, sb), sa.sizes()) : Tensor(),
                               gb ? sumTo(mul(g, sa), sb.sizes()) : Tensor()};
  });
}

Tensor mul(const Tensor& a, float scalar) {
  checkFloat("mul", "input", a);
  Tensor out = mapUnary("mul", a, UnaryOp::Scale, scalar);
  return autograd::recordFunction(out, "MulScalarBackward", {a},
                                  [scalar](const Tensor& g) { return std::vector<Tensor>{mul(g, scalar)}; });
}

Tensor addScalar(const Tensor& a, float scalar) {
  checkFloat("addScalar", "input", a);
  Tensor out = mapUnary("addScalar", a, UnaryOp::AddScalar, scalar);
  return autograd::recordFunction(out, "AddScalarBackward", {a},
                                  [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor neg(const Tensor& a) { return mul(a, -1.0f); }

Tensor relu(const Tensor& x) {
  checkFloat("relu", "input", x);
  Tensor out = mapUnary("relu", x, UnaryOp::Relu);
  const Tensor saved = out.detach();
  return autograd::recordFunction(out, "ReluBackward", {x}, [saved](const Tensor& g) {
    return std::vector<Tensor>{mapBinary("relu backward", g, saved, BinaryOp::ReluBackward)};
  });
}

}  // namespace aps::ops
