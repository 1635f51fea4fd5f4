#include "framework/ops/Elementwise.h"

#include "framework/autograd/Function.h"
#include "framework/core/Parallel.h"
#include "framework/core/Profile.h"
#include "framework/ops/Broadcast.h"
#include "framework/ops/Checks.h"
#include "framework/ops/kernels/Elementwise.h"

namespace aps::ops {

namespace {
constexpr int64_t kGrain = 1 << 14;

template <typename F>
Tensor mapUnary(const Tensor& x, F f) {
  const Tensor c = x.contiguous();
  Tensor out = Tensor::empty(c.sizes());
  const profile::Scope scope("elementwise", static_cast<double>(c.numel()), 8.0 * static_cast<double>(c.numel()));
  const float* in = c.data<float>();
  float* o = out.data<float>();
  parallelFor(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) o[i] = f(in[i]);
  });
  return out;
}

template <typename F>
Tensor mapBinary(const char* op, const Tensor& a, const Tensor& b, F f) {
  checkFloat(op, "first input", a);
  checkFloat(op, "second input", b);
  const Shape shape = broadcastShapes(op, a.sizes(), b.sizes());
  const Tensor ca = a.sizes() == shape ? a.contiguous() : broadcastTo(a, shape);
  const Tensor cb = b.sizes() == shape ? b.contiguous() : broadcastTo(b, shape);
  Tensor out = Tensor::empty(shape);
  const profile::Scope scope("elementwise", static_cast<double>(out.numel()), 12.0 * static_cast<double>(out.numel()));
  const float* pa = ca.data<float>();
  const float* pb = cb.data<float>();
  float* o = out.data<float>();
  parallelFor(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) o[i] = f(pa[i], pb[i]);
  });
  return out;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = mapBinary("add", a, b, [](float x, float y) { return kernels::add(x, y); });
  const Shape sa = a.sizes(), sb = b.sizes();
  const bool ga = a.requiresGrad(), gb = b.requiresGrad();
  return autograd::recordFunction(out, "AddBackward", {a, b}, [=](const Tensor& g) {
    return std::vector<Tensor>{ga ? sumTo(g, sa) : Tensor(), gb ? sumTo(g, sb) : Tensor()};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = mapBinary("sub", a, b, [](float x, float y) { return kernels::sub(x, y); });
  const Shape sa = a.sizes(), sb = b.sizes();
  const bool ga = a.requiresGrad(), gb = b.requiresGrad();
  return autograd::recordFunction(out, "SubBackward", {a, b}, [=](const Tensor& g) {
    return std::vector<Tensor>{ga ? sumTo(g, sa) : Tensor(), gb ? neg(sumTo(g, sb)) : Tensor()};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = mapBinary("mul", a, b, [](float x, float y) { return kernels::mul(x, y); });
  const bool ga = a.requiresGrad(), gb = b.requiresGrad();
  const Tensor sa = a.detach(), sb = b.detach();
  return autograd::recordFunction(out, "MulBackward", {a, b}, [=](const Tensor& g) {
    return std::vector<Tensor>{ga ? sumTo(mul(g, sb), sa.sizes()) : Tensor(),
                               gb ? sumTo(mul(g, sa), sb.sizes()) : Tensor()};
  });
}

Tensor mul(const Tensor& a, float scalar) {
  checkFloat("mul", "input", a);
  Tensor out = mapUnary(a, [scalar](float x) { return kernels::scale(x, scalar); });
  return autograd::recordFunction(out, "MulScalarBackward", {a},
                                  [scalar](const Tensor& g) { return std::vector<Tensor>{mul(g, scalar)}; });
}

Tensor addScalar(const Tensor& a, float scalar) {
  checkFloat("addScalar", "input", a);
  Tensor out = mapUnary(a, [scalar](float x) { return kernels::addScalar(x, scalar); });
  return autograd::recordFunction(out, "AddScalarBackward", {a},
                                  [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor neg(const Tensor& a) { return mul(a, -1.0f); }

Tensor relu(const Tensor& x) {
  checkFloat("relu", "input", x);
  Tensor out = mapUnary(x, [](float v) { return kernels::relu(v); });
  const Tensor saved = out.detach();
  return autograd::recordFunction(out, "ReluBackward", {x}, [saved](const Tensor& g) {
    return std::vector<Tensor>{
        mapBinary("relu backward", g, saved, [](float gv, float y) { return kernels::reluBackward(gv, y); })};
  });
}

}  // namespace aps::ops
