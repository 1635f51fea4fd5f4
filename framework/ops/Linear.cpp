#include "framework/ops/Linear.h"

#include "framework/autograd/Function.h"
#include "framework/core/Parallel.h"
#include "framework/core/Profile.h"
#include "framework/ops/Autocast.h"
#include "framework/ops/Checks.h"

#include <Eigen/Core>

#include <algorithm>

namespace aps::ops {

namespace {
using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const Matrix>;
using Map = Eigen::Map<Matrix>;

ConstMap asMatrix(const Tensor& t) { return ConstMap(t.data<float>(), t.size(0), t.size(1)); }
Map asMatrix(Tensor& t) { return Map(t.data<float>(), t.size(0), t.size(1)); }

// Column sums of g (N, out), each summed over n in order (bias gradient).
Tensor columnSums(const Tensor& g) {
  const int64_t n = g.size(0), m = g.size(1);
  Tensor out = Tensor::empty({m});
  const float* p = g.data<float>();
  float* o = out.data<float>();
  parallelFor(m, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      float s = 0.0f;
      for (int64_t i = 0; i < n; ++i) s += p[i * m + j];
      o[j] = s;
    }
  });
  return out;
}
}  // namespace

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
  const Tensor cx = x.contiguous().detach(), cw = weight.contiguous().detach();
  Tensor out = Tensor::empty({x.size(0), weight.size(0)});
  // Each of forward, backward-data and backward-weight: 2 x rows x outputs x inputs FLOPs.
  const double flops = 2.0 * static_cast<double>(x.size(0) * weight.size(0) * weight.size(1));
  const double bytes = 4.0 * static_cast<double>(cx.numel() + cw.numel() + out.numel());
  {
    const profile::Scope scope("linear.forward", flops, bytes);
    auto y = asMatrix(out);
    y.noalias() = asMatrix(cx) * asMatrix(cw).transpose();
    if (bias.defined()) {
      const Tensor cb = bias.contiguous();
      y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(cb.data<float>(), cb.numel());
    }
  }
  const bool gx = x.requiresGrad(), gw = weight.requiresGrad(), gb = bias.defined() && bias.requiresGrad();
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  const bool hasBias = bias.defined();
  return autograd::recordFunction(out, "LinearBackward", inputs, [=](const Tensor& gIn) {
    const Tensor g = gIn.contiguous();
    const profile::Scope scope("linear.backward", (gx ? flops : 0.0) + (gw ? flops : 0.0), bytes);
    std::vector<Tensor> grads(hasBias ? 3 : 2);
    if (gx) {
      grads[0] = Tensor::empty(cx.sizes());
      asMatrix(grads[0]).noalias() = asMatrix(g) * asMatrix(cw);
    }
    if (gw) {
      grads[1] = Tensor::empty(cw.sizes());
      asMatrix(grads[1]).noalias() = asMatrix(g).transpose() * asMatrix(cx);
    }
    if (gb) grads[2] = columnSums(g);
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
  const Tensor ca = a.contiguous().detach(), cb = b.contiguous().detach();
  Tensor out = Tensor::empty({a.size(0), b.size(1)});
  asMatrix(out).noalias() = asMatrix(ca) * asMatrix(cb);
  const bool ga = a.requiresGrad(), gb = b.requiresGrad();
  return autograd::recordFunction(out, "MatmulBackward", {a, b}, [=](const Tensor& gIn) {
    const Tensor g = gIn.contiguous();
    std::vector<Tensor> grads(2);
    if (ga) {
      grads[0] = Tensor::empty(ca.sizes());
      asMatrix(grads[0]).noalias() = asMatrix(g) * asMatrix(cb).transpose();
    }
    if (gb) {
      grads[1] = Tensor::empty(cb.sizes());
      asMatrix(grads[1]).noalias() = asMatrix(ca).transpose() * asMatrix(g);
    }
    return grads;
  });
}

}  // namespace aps::ops
