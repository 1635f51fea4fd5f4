#include "framework/autograd/GradAccumulation.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/tensor/cuda/CudaRuntime.h"

namespace aps::autograd {

namespace {
constexpr int64_t kGrain = 1 << 14;

void checkSame(const Tensor& a, const Tensor& b) {
  APS_CHECK(a.sizes() == b.sizes(), "gradient accumulation: shapes {} and {} do not match", a.shapeString(),
            b.shapeString());
  APS_CHECK(a.dtype() == DType::Float32 && b.dtype() == DType::Float32,
            "gradient accumulation: dtypes {} and {} (float32 expected)", dtypeName(a.dtype()), dtypeName(b.dtype()));
}
// On a GPU: out = a + b (0 + b without a) by the runtime's kernel, on contiguous tensors.
void addOnDevice(Tensor& out, const Tensor* a, const Tensor& b) {
  APS_CHECK(out.device() == b.device() && (a == nullptr || a->device() == b.device()),
            "gradient accumulation: gradients on {} and {}", deviceName(out.device()), deviceName(b.device()));
  const Tensor cb = b.contiguous();
  const Tensor ca = a != nullptr ? a->contiguous() : Tensor();
  APS_CHECK(out.isContiguous(), "gradient accumulation on {}: the gradient of shape {} must be contiguous",
            deviceName(out.device()), out.shapeString());
  cuda::addFloatsAsync(out.data<float>(), a != nullptr ? ca.data<float>() : nullptr, cb.data<float>(), out.numel(),
                       nullptr);
}
}  // namespace

void addInto(Tensor& dst, const Tensor& src) {
  checkSame(dst, src);
  if (dst.device().isCuda()) return addOnDevice(dst, &dst, src);
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
  if (dst.device().isCuda()) return addOnDevice(dst, nullptr, src);
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
  if (a.device().isCuda()) {
    Tensor out = Tensor::empty(a.sizes(), DType::Float32, a.device());
    addOnDevice(out, &a, b);
    return out;
  }
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
