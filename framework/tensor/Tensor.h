#pragma once

#include "framework/core/Rng.h"
#include "framework/tensor/Buffer.h"
#include "framework/tensor/DType.h"
#include "framework/tensor/Shape.h"
#include "framework/tensor/TensorImpl.h"

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace aps {

// A handle to a TensorImpl (shared, like torch.Tensor): copying a Tensor aliases it.
// The view methods here (view, reshape, permute, narrow, ...) share storage and do NOT
// record autograd history; the differentiable versions are in framework/ops.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Factories (cpu unless a device is given; a cuda device must exist, else aps::Error).
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::Float32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::Float32);
  static Tensor scalar(float value) { return full({}, value); }
  static Tensor fromVector(std::span<const float> values, const Shape& shape);
  static Tensor fromVector(std::span<const int64_t> values, const Shape& shape);
  static Tensor fromVector(std::span<const int32_t> values, const Shape& shape);
  static Tensor fromVector(std::span<const uint8_t> values, const Shape& shape);
  static Tensor fromVector(std::initializer_list<float> values, const Shape& shape) {
    return fromVector(std::span<const float>(values.begin(), values.size()), shape);
  }
  static Tensor randn(const Shape& shape, Rng& rng, float mean = 0.0f, float stddev = 1.0f);
  static Tensor uniform(const Shape& shape, Rng& rng, float low = 0.0f, float high = 1.0f);

  bool defined() const { return impl_ != nullptr; }
  const Shape& sizes() const { return impl().sizes(); }
  const Shape& strides() const { return impl().strides(); }
  int64_t dim() const { return static_cast<int64_t>(impl().sizes().size()); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t numel() const { return shapeNumel(impl().sizes()); }
  int64_t storageOffset() const { return impl().offset(); }
  DType dtype() const { return impl().dtype(); }
  Device device() const { return impl().storage()->device(); }
  bool isContiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage(); }
  bool sharesStorage(const Tensor& other) const { return storage() == other.storage(); }
  std::string shapeString() const { return formatShape(sizes()); }

  // Views: share storage. view() needs a contiguous tensor; sizes may contain one -1.
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;  // a view when contiguous, else a copy
  Tensor permute(const Shape& order) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // drops `dim`
  Tensor flatten(int64_t startDim = 0, int64_t endDim = -1) const;
  Tensor detach() const;  // same storage and view, no autograd history

  // Copies.
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;  // a contiguous copy on `device` (itself when already there)
  // Same shape; converts dtype; writes through this view. Between devices (or within a GPU)
  // the dtypes must match; views on either side are gathered or scattered on their own device
  // (overlapping views as if through a temporary).
  void copyFrom(const Tensor& src);
  void fill(double value);
  void zero() { fill(0.0); }

  // Element access (for tests and small bookkeeping; not for hot loops). On a cuda tensor
  // each call copies through the host.
  double value(std::initializer_list<int64_t> index) const;
  void setValue(std::initializer_list<int64_t> index, double v);
  float item() const;  // the single element of a one-element tensor, as float
  std::vector<float> toFloatVector() const;
  template <typename T>
  std::vector<T> toVector() const;

  // Raw pointer to the first element of this view; checks the dtype matches T.
  template <typename T>
  T* data() const;
  void* rawData() const;

  // The contiguous elements as a plain buffer: what precision and comm see.
  BufferView buffer() const;

  // Autograd state (plain data; framework/autograd gives it meaning).
  bool requiresGrad() const { return defined() && impl().autograd().requiresGrad; }
  Tensor& setRequiresGrad(bool on = true);
  Tensor grad() const;
  void setGrad(const Tensor& grad);
  bool isLeaf() const { return impl().autograd().gradFn == nullptr; }

  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& implPtr() const { return impl_; }
  bool sameAs(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace aps
