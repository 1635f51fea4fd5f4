#include "framework/autograd/GradAccumulation.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"

namespace aps::autograd {

namespace {
constexpr int64_t kGrain = 1 << 14;

void checkSame(const Tensor& a, const Tensor& b) {
  APS_CHECK(a.sizes() == b.sizes(), "gradient accumulation: shapes {} and {} do not match", a.shapeString(),
            b.shapeString());
  APS_CHECK(a.dtype() == DType::Float32 && b.dtype() == DType::Float32,
            "gradient accumulation: dtypes {} and {} (float32 expected)", dtypeName(a.dtype()), dtypeName(b.dtype()));
}
}  // namespace

void addInto(Tensor& dst, const Tensor& src) {
  checkSame(dst, src);
  const Tensor s = src.contiguous();
  const float* from = s.data<float>();
  if (dst.isContiguous()) {
    float* to = dst.data<float>();
    parallelFor(dst.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) to[i] += from[i];
    });
    return;
  }
  Tensor sum = addGradients(dst, s);
  dst.copyFrom(sum);
}

void assignZeroPlus(Tensor& dst, const Tensor& src) {
  checkSame(dst, src);
  if (!dst.isContiguous()) {
    dst.zero();
    addInto(dst, src);
    return;
  }
  const Tensor s = src.contiguous();
  const float* from = s.data<float>();
  float* to = dst.data<float>();
  parallelFor(dst.numel(), kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) to[i] = 0.0f + from[i];
  });
}

Tensor addGradients(const Tensor& a, const Tensor& b) {
  checkSame(a, b);
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  Tensor out = Tensor::empty(a.sizes());
  const float* pa = ca.data<float>();
  const float* pb = cb.data<float>();
  float* po = out.data<float>();
  parallelFor(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) po[i] = pa[i] + pb[i];
  });
  return out;
}

bool writableInPlace(const Tensor& t) {
  return t.implPtr().use_count() == 1 && t.storage().use_count() == 1 && t.isContiguous() &&
         t.dtype() == DType::Float32;
}

}  // namespace aps::autograd
