#include "framework/ops/Reduction.h"

#include "framework/autograd/Function.h"
#include "framework/core/Parallel.h"
#include "framework/ops/Broadcast.h"
#include "framework/ops/Checks.h"
#include "framework/ops/Elementwise.h"

#include <algorithm>
#include <cmath>

namespace aps::ops {

namespace {
constexpr int64_t kBlock = 4096;

double blockedSum(const float* p, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  parallelFor(blocks, 4, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      double s = 0.0;
      for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) s += p[i];
      partial[static_cast<size_t>(b)] = s;
    }
  });
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

// Sum over `dims` with the result shaped as keepDim would shape it.
Tensor sumKeep(const Tensor& x, const std::vector<bool>& reduced) {
  const int64_t rank = x.dim();
  Shape order, keptShape = x.sizes();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d]) {
      order.push_back(d);
      outer *= x.sizes()[d];
    }
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) {
      order.push_back(d);
      inner *= x.sizes()[d];
      keptShape[d] = 1;
    }
  }
  // Reductions are not on the GPU's training path (the loss is reduced inside its kernel): a
  // device tensor is reduced on the host and the result goes back to its device.
  const Tensor c = x.to(Device::cpu()).permute(order).contiguous();
  Tensor out = Tensor::empty(keptShape);
  const float* p = c.data<float>();
  float* o = out.data<float>();
  parallelFor(outer, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(inner, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double s = 0.0;
      for (int64_t j = 0; j < inner; ++j) s += p[i * inner + j];
      o[i] = static_cast<float>(s);
    }
  });
  return out.to(x.device());
}
}  // namespace

Tensor sum(const Tensor& x) {
  checkFloat("sum", "input", x);
  const Tensor c = x.to(Device::cpu()).contiguous();  // as sumKeep: a device tensor is summed on the host
  const Device device = x.device();
  Tensor out = Tensor::scalar(static_cast<float>(blockedSum(c.data<float>(), c.numel()))).to(device);
  const Shape shape = x.sizes();
  return autograd::recordFunction(out, "SumBackward", {x}, [shape, device](const Tensor& g) {
    return std::vector<Tensor>{Tensor::full(shape, g.item()).to(device)};
  });
}

Tensor mean(const Tensor& x) {
  APS_CHECK(x.defined() && x.numel() > 0, "mean: input is empty");
  return mul(sum(x), 1.0f / static_cast<float>(x.numel()));
}

Tensor sum(const Tensor& x, const Shape& dims, bool keepDim) {
  checkFloat("sum", "input", x);
  std::vector<bool> reduced(static_cast<size_t>(x.dim()), false);
  for (int64_t d : dims) {
    const int64_t nd = normalizeDim(d, x.dim(), "sum");
    APS_CHECK(!reduced[nd], "sum: dim {} repeated in {}", nd, formatShape(dims));
    reduced[nd] = true;
  }
  Tensor kept = sumKeep(x, reduced);
  Shape outShape;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!reduced[d] || keepDim) outShape.push_back(kept.sizes()[d]);
  }
  Tensor out = kept.view(outShape);
  const Shape keptShape = kept.sizes(), inShape = x.sizes();
  return autograd::recordFunction(out, "SumDimBackward", {x}, [keptShape, inShape](const Tensor& g) {
    return std::vector<Tensor>{broadcastTo(g.reshape(keptShape), inShape)};
  });
}

Tensor mean(const Tensor& x, const Shape& dims, bool keepDim) {
  Tensor s = sum(x, dims, keepDim);
  APS_CHECK(s.numel() > 0 && x.numel() > 0, "mean: input of shape {} is empty", x.shapeString());
  return mul(s, static_cast<float>(s.numel()) / static_cast<float>(x.numel()));
}

Tensor argmax(const Tensor& x, int64_t dim) {
  checkFloat("argmax", "input", x);
  const int64_t d = normalizeDim(dim, x.dim(), "argmax");
  const int64_t size = x.size(d);
  APS_CHECK(size > 0, "argmax: dim {} of shape {} is empty", d, x.shapeString());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= x.size(i);
  for (int64_t i = d + 1; i < x.dim(); ++i) inner *= x.size(i);
  Shape outShape = x.sizes();
  outShape.erase(outShape.begin() + d);
  const Tensor c = x.to(Device::cpu()).contiguous();  // as sumKeep: on the host
  Tensor out = Tensor::empty(outShape, DType::Int64);
  const float* p = c.data<float>();
  int64_t* o = out.data<int64_t>();
  parallelFor(outer * inner, std::max<int64_t>(1, (1 << 14) / size), [&](int64_t begin, int64_t end) {
    for (int64_t idx = begin; idx < end; ++idx) {
      const float* base = p + (idx / inner) * size * inner + idx % inner;
      int64_t best = 0;
      for (int64_t j = 1; j < size; ++j) {
        const float v = base[j * inner], b = base[best * inner];
        if (v > b || (std::isnan(v) && !std::isnan(b))) best = j;
      }
      o[idx] = best;
    }
  });
  return out.to(x.device());
}

}  // namespace aps::ops
