#include "framework/ops/Broadcast.h"

#include "framework/core/Error.h"
#include "framework/ops/Checks.h"

namespace aps::ops {

Shape broadcastShapes(const char* op, const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    APS_CHECK(da == db || da == 1 || db == 1, "{}: shapes {} and {} do not match", op, formatShape(a), formatShape(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {
// Strides (in elements of the contiguous `from`) that read `from` as if broadcast to `to`.
Shape broadcastStrides(const Shape& from, const Shape& to) {
  const Shape contiguous = contiguousStrides(from);
  Shape strides(to.size(), 0);
  const size_t shift = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) strides[i + shift] = from[i] == 1 ? 0 : contiguous[i];
  return strides;
}
}  // namespace

Tensor broadcastTo(const Tensor& x, const Shape& shape) {
  checkFloat("broadcastTo", "input", x);
  APS_CHECK(broadcastShapes("broadcastTo", x.sizes(), shape) == shape, "broadcastTo: cannot broadcast {} to {}",
            x.shapeString(), formatShape(shape));
  // No model of the registry broadcasts on a GPU: a device tensor goes through the host.
  if (!x.device().isCpu()) return broadcastTo(x.to(Device::cpu()), shape).to(x.device());
  const Tensor c = x.contiguous();
  const Tensor view(std::make_shared<TensorImpl>(c.storage(), shape, broadcastStrides(c.sizes(), shape),
                                                 c.storageOffset(), DType::Float32));
  return view.clone();
}

Tensor sumTo(const Tensor& g, const Shape& shape) {
  if (g.sizes() == shape) return g;
  APS_CHECK(broadcastShapes("sumTo", shape, g.sizes()) == g.sizes(), "sumTo: cannot reduce {} to {}", g.shapeString(),
            formatShape(shape));
  if (!g.device().isCpu()) return sumTo(g.to(Device::cpu()), shape).to(g.device());  // as broadcastTo
  const Tensor c = g.contiguous();
  Tensor out = Tensor::zeros(shape);
  const Shape strides = broadcastStrides(shape, c.sizes());
  const Shape& sizes = c.sizes();
  const float* src = c.data<float>();
  float* dst = out.data<float>();
  // One sequential pass in row-major order: each output element sums its inputs in a fixed order.
  std::vector<int64_t> counter(sizes.size(), 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < c.numel(); ++i) {
    dst[offset] += src[i];
    for (size_t d = sizes.size(); d-- > 0;) {
      if (++counter[d] < sizes[d]) {
        offset += strides[d];
        break;
      }
      offset -= strides[d] * (sizes[d] - 1);
      counter[d] = 0;
    }
  }
  return out;
}

}  // namespace aps::ops
