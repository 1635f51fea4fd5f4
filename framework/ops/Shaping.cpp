#include "framework/ops/Shaping.h"

#include "framework/autograd/Function.h"
#include "framework/ops/Checks.h"

namespace aps::ops {

Tensor reshape(const Tensor& x, const Shape& shape) {
  checkFloat("reshape", "input", x);
  Tensor out = x.reshape(shape);
  if (out.sameAs(x)) out = x.detach();
  const Shape inShape = x.sizes();
  return autograd::recordFunction(out, "ReshapeBackward", {x},
                                  [inShape](const Tensor& g) { return std::vector<Tensor>{g.reshape(inShape)}; });
}

Tensor flatten(const Tensor& x, int64_t startDim, int64_t endDim) {
  checkFloat("flatten", "input", x);
  return reshape(x, x.flatten(startDim, endDim).sizes());
}

Tensor permute(const Tensor& x, const Shape& order) {
  checkFloat("permute", "input", x);
  Tensor out = x.permute(order).contiguous();
  if (out.sameAs(x)) out = x.detach();
  Shape inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    inverse[normalizeDim(order[i], x.dim(), "permute")] = static_cast<int64_t>(i);
  return autograd::recordFunction(out, "PermuteBackward", {x}, [inverse](const Tensor& g) {
    return std::vector<Tensor>{g.permute(inverse).contiguous()};
  });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  checkFloat("narrow", "input", x);
  Tensor out = x.narrow(dim, start, length).clone();
  const Shape inShape = x.sizes();
  const int64_t d = normalizeDim(dim, x.dim(), "narrow");
  return autograd::recordFunction(out, "NarrowBackward", {x}, [=](const Tensor& g) {
    Tensor gi = Tensor::zeros(inShape);
    gi.narrow(d, start, length).copyFrom(g);
    return std::vector<Tensor>{gi};
  });
}

Tensor concat(const std::vector<Tensor>& inputs, int64_t dim) {
  APS_CHECK(!inputs.empty(), "concat: no inputs");
  checkFloat("concat", "input 0", inputs[0]);
  const int64_t d = normalizeDim(dim, inputs[0].dim(), "concat");
  Shape shape = inputs[0].sizes();
  shape[d] = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkFloat("concat", "input", inputs[i]);
    Shape expected = inputs[0].sizes(), got = inputs[i].sizes();
    APS_CHECK(got.size() == expected.size(), "concat: shapes {} and {} do not match", formatShape(expected),
              formatShape(got));
    expected[d] = got[d];
    APS_CHECK(got == expected, "concat: shapes {} and {} do not match outside dim {}", formatShape(inputs[0].sizes()),
              formatShape(got), d);
    shape[d] += got[d];
  }
  Tensor out = Tensor::empty(shape);
  std::vector<int64_t> starts;
  int64_t offset = 0;
  for (const Tensor& t : inputs) {
    out.narrow(d, offset, t.size(d)).copyFrom(t);
    starts.push_back(offset);
    offset += t.size(d);
  }
  std::vector<int64_t> lengths;
  for (const Tensor& t : inputs) lengths.push_back(t.size(d));
  return autograd::recordFunction(out, "ConcatBackward", inputs, [d, starts, lengths](const Tensor& g) {
    std::vector<Tensor> grads;
    for (size_t i = 0; i < starts.size(); ++i) grads.push_back(g.narrow(d, starts[i], lengths[i]).contiguous());
    return grads;
  });
}

}  // namespace aps::ops
