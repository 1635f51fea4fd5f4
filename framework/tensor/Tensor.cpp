#include "framework/tensor/Tensor.h"

#include "framework/core/Error.h"
#include "framework/core/Parallel.h"
#include "framework/tensor/HalfFloat.h"
#include "framework/tensor/cuda/CudaRuntime.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace aps {

namespace {

std::shared_ptr<TensorImpl> makeContiguous(const Shape& shape, DType dtype, bool zeroed,
                                           Device device = Device::cpu()) {
  const int64_t n = shapeNumel(shape);
  auto storage = std::make_shared<Storage>(static_cast<size_t>(n) * dtypeSize(dtype), zeroed, device);
  return std::make_shared<TensorImpl>(std::move(storage), shape, contiguousStrides(shape), 0, dtype);
}

double readElement(const std::byte* p, DType dtype) {
  switch (dtype) {
    case DType::Float32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::Float16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return halfBitsToFloat(v);
    }
    case DType::BFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return bfloat16BitsToFloat(v);
    }
    case DType::UInt8:
      return static_cast<double>(*reinterpret_cast<const uint8_t*>(p));
    case DType::Int32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::Int64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
  }
  return 0.0;
}

void writeElement(std::byte* p, DType dtype, double value) {
  switch (dtype) {
    case DType::Float32: {
      const float v = static_cast<float>(value);
      std::memcpy(p, &v, 4);
      return;
    }
    case DType::Float16: {
      const uint16_t v = floatToHalfBits(static_cast<float>(value));
      std::memcpy(p, &v, 2);
      return;
    }
    case DType::BFloat16: {
      const uint16_t v = floatToBFloat16Bits(static_cast<float>(value));
      std::memcpy(p, &v, 2);
      return;
    }
    case DType::UInt8:
      *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(value);
      return;
    case DType::Int32: {
      const int32_t v = static_cast<int32_t>(value);
      std::memcpy(p, &v, 4);
      return;
    }
    case DType::Int64: {
      const int64_t v = static_cast<int64_t>(value);
      std::memcpy(p, &v, 8);
      return;
    }
  }
}

// Calls fn(linearIndex, elementOffset) for every element of a strided view in row-major
// order. Offsets are in elements relative to the storage start.
template <typename Fn>
void forEachElement(const Shape& sizes, const Shape& strides, int64_t offset, Fn&& fn) {
  const int64_t n = shapeNumel(sizes);
  if (n == 0) return;
  const size_t rank = sizes.size();
  std::vector<int64_t> counter(rank, 0);
  int64_t elementOffset = offset;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, elementOffset);
    for (size_t d = rank; d-- > 0;) {
      if (++counter[d] < sizes[d]) {
        elementOffset += strides[d];
        break;
      }
      elementOffset -= strides[d] * (sizes[d] - 1);
      counter[d] = 0;
    }
  }
}

template <typename T>
constexpr bool dtypeMatches(DType t) {
  if constexpr (std::is_same_v<T, float>) return t == DType::Float32;
  if constexpr (std::is_same_v<T, uint16_t>) return t == DType::Float16 || t == DType::BFloat16;
  if constexpr (std::is_same_v<T, uint8_t>) return t == DType::UInt8;
  if constexpr (std::is_same_v<T, int32_t>) return t == DType::Int32;
  if constexpr (std::is_same_v<T, int64_t>) return t == DType::Int64;
  return false;
}

template <typename T>
Tensor fromValues(std::span<const T> values, const Shape& shape, DType dtype) {
  APS_CHECK(static_cast<int64_t>(values.size()) == shapeNumel(shape),
            "fromVector: {} values do not fill shape {} ({} elements)", values.size(), formatShape(shape),
            shapeNumel(shape));
  Tensor t = Tensor::empty(shape, dtype);
  if (!values.empty()) std::memcpy(t.rawData(), values.data(), values.size() * sizeof(T));
  return t;
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return Tensor(makeContiguous(shape, dtype, false, device));
}
Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return Tensor(makeContiguous(shape, dtype, true, device));
}
Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill(value);
  return t;
}

Tensor Tensor::fromVector(std::span<const float> values, const Shape& shape) {
  return fromValues(values, shape, DType::Float32);
}
Tensor Tensor::fromVector(std::span<const int64_t> values, const Shape& shape) {
  return fromValues(values, shape, DType::Int64);
}
Tensor Tensor::fromVector(std::span<const int32_t> values, const Shape& shape) {
  return fromValues(values, shape, DType::Int32);
}
Tensor Tensor::fromVector(std::span<const uint8_t> values, const Shape& shape) {
  return fromValues(values, shape, DType::UInt8);
}

Tensor Tensor::randn(const Shape& shape, Rng& rng, float mean, float stddev) {
  Tensor t = empty(shape);
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = rng.normal(mean, stddev);
  return t;
}

Tensor Tensor::uniform(const Shape& shape, Rng& rng, float low, float high) {
  APS_CHECK(low <= high, "uniform: low {} is greater than high {}", low, high);
  Tensor t = empty(shape);
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = low + (high - low) * rng.uniform();
  return t;
}

TensorImpl& Tensor::impl() const {
  APS_CHECK(impl_ != nullptr, "use of an undefined tensor");
  return *impl_;
}

int64_t Tensor::size(int64_t d) const { return sizes()[normalizeDim(d, dim(), "size")]; }

bool Tensor::isContiguous() const {
  // contiguousStrides' strides, from the last dimension, without building them (every op asks).
  const Shape& size = sizes();
  const Shape& stride = strides();
  int64_t expected = 1;
  for (size_t i = size.size(); i-- > 0;) {
    if (size[i] != 1 && stride[i] != expected) return false;
    expected *= std::max<int64_t>(size[i], 1);
  }
  return true;
}

Tensor Tensor::view(const Shape& shape) const {
  APS_CHECK(isContiguous(), "view: tensor of shape {} is not contiguous (use reshape or contiguous())", shapeString());
  Shape resolved = shape;
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      APS_CHECK(inferred < 0, "view: shape {} has more than one -1", formatShape(shape));
      inferred = static_cast<int>(i);
    } else {
      APS_CHECK(resolved[i] >= 0, "view: shape {} has a negative size", formatShape(shape));
      known *= resolved[i];
    }
  }
  if (inferred >= 0) {
    APS_CHECK(known > 0 && numel() % known == 0, "view: shape {} is invalid for a tensor of shape {}",
              formatShape(shape), shapeString());
    resolved[inferred] = numel() / known;
  }
  APS_CHECK(shapeNumel(resolved) == numel(), "view: shape {} is invalid for a tensor of shape {} ({} elements)",
            formatShape(shape), shapeString(), numel());
  return Tensor(
      std::make_shared<TensorImpl>(storage(), resolved, contiguousStrides(resolved), storageOffset(), dtype()));
}

Tensor Tensor::reshape(const Shape& shape) const { return isContiguous() ? view(shape) : contiguous().view(shape); }

Tensor Tensor::permute(const Shape& order) const {
  APS_CHECK(static_cast<int64_t>(order.size()) == dim(), "permute: order {} does not match a tensor of rank {}",
            formatShape(order), dim());
  Shape newSizes(order.size()), newStrides(order.size());
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t d = normalizeDim(order[i], dim(), "permute");
    APS_CHECK(!seen[d], "permute: order {} repeats dim {}", formatShape(order), d);
    seen[d] = true;
    newSizes[i] = sizes()[d];
    newStrides[i] = strides()[d];
  }
  return Tensor(std::make_shared<TensorImpl>(storage(), newSizes, newStrides, storageOffset(), dtype()));
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  Shape order(dim());
  for (int64_t i = 0; i < dim(); ++i) order[i] = i;
  std::swap(order[normalizeDim(dim0, dim(), "transpose")], order[normalizeDim(dim1, dim(), "transpose")]);
  return permute(order);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  const int64_t nd = normalizeDim(d, dim(), "narrow");
  APS_CHECK(start >= 0 && length >= 0 && start + length <= sizes()[nd],
            "narrow: start {} and length {} are out of range for dim {} of shape {}", start, length, nd, shapeString());
  return slice(nd, start, start + length);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  const int64_t nd = normalizeDim(d, dim(), "slice");
  APS_CHECK(step >= 1, "slice: step must be >= 1, got {}", step);
  const int64_t n = sizes()[nd];
  start = std::clamp<int64_t>(start < 0 ? start + n : start, 0, n);
  end = std::clamp<int64_t>(end < 0 ? end + n : end, start, n);
  Shape newSizes = sizes(), newStrides = strides();
  newSizes[nd] = (end - start + step - 1) / step;
  newStrides[nd] = strides()[nd] * step;
  return Tensor(
      std::make_shared<TensorImpl>(storage(), newSizes, newStrides, storageOffset() + start * strides()[nd], dtype()));
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  const int64_t nd = normalizeDim(d, dim(), "select");
  APS_CHECK(index >= -sizes()[nd] && index < sizes()[nd], "select: index {} is out of range for dim {} of shape {}",
            index, nd, shapeString());
  if (index < 0) index += sizes()[nd];
  Shape newSizes = sizes(), newStrides = strides();
  newSizes.erase(newSizes.begin() + nd);
  newStrides.erase(newStrides.begin() + nd);
  return Tensor(
      std::make_shared<TensorImpl>(storage(), newSizes, newStrides, storageOffset() + index * strides()[nd], dtype()));
}

Tensor Tensor::flatten(int64_t startDim, int64_t endDim) const {
  if (dim() == 0) return reshape({1});
  const int64_t s = normalizeDim(startDim, dim(), "flatten");
  const int64_t e = normalizeDim(endDim, dim(), "flatten");
  APS_CHECK(s <= e, "flatten: start dim {} is after end dim {}", s, e);
  Shape shape(sizes().begin(), sizes().begin() + s);
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= sizes()[i];
  shape.push_back(merged);
  shape.insert(shape.end(), sizes().begin() + e + 1, sizes().end());
  return reshape(shape);
}

Tensor Tensor::detach() const {
  return Tensor(std::make_shared<TensorImpl>(storage(), sizes(), strides(), storageOffset(), dtype()));
}

Tensor Tensor::contiguous() const { return isContiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = empty(sizes(), dtype(), device());
  out.copyFrom(*this);
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return clone();
  APS_CHECK(device().isCpu(), "to({}): dtype conversion of a tensor on {} is not supported; convert on the cpu",
            dtypeName(target), deviceName(device()));
  Tensor out = empty(sizes(), target);
  out.copyFrom(*this);
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor out = empty(sizes(), dtype(), target);
  out.copyFrom(*this);
  return out;
}

namespace {
cuda::StridedLayout layoutOf(const Tensor& t) {
  APS_CHECK(t.dim() <= cuda::StridedLayout::kMaxDims, "copy: a view of {} dimensions on {} (at most {})", t.dim(),
            deviceName(t.device()), cuda::StridedLayout::kMaxDims);
  cuda::StridedLayout layout;
  layout.dims = static_cast<int32_t>(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) {
    layout.sizes[d] = t.size(d);
    layout.strides[d] = t.strides()[static_cast<size_t>(d)];
  }
  return layout;
}

// A copy with a cuda tensor on either side. Between contiguous tensors one memcpy; a view on
// the device is gathered or scattered there by a kernel (through a temporary when both views
// share storage), a strided cpu side through a contiguous cpu tensor.
void copyAcrossDevices(Tensor& dst, const Tensor& src) {
  APS_CHECK(dst.dtype() == src.dtype(), "copy: {} to {} with dtypes {} and {}: convert the dtype on the cpu",
            deviceName(src.device()), deviceName(dst.device()), dtypeName(src.dtype()), dtypeName(dst.dtype()));
  if (dst.numel() == 0) return;
  const bool contiguous = dst.isContiguous() && src.isContiguous();
  if (dst.device().isCuda() && src.device().isCuda() && dst.sharesStorage(src)) {
    if (dst.rawData() == src.rawData() && dst.strides() == src.strides()) return;  // the same view
    copyAcrossDevices(dst, src.clone());  // views that may overlap: through a temporary
    return;
  }
  if (!contiguous && dst.device().isCuda() && src.device().isCuda()) {
    cuda::stridedCopyAsync(dst.rawData(), layoutOf(dst), src.rawData(), layoutOf(src), dst.numel(),
                           dtypeSize(dst.dtype()), nullptr);
    return;
  }
  if (!src.isContiguous()) {  // gathered on its own device first
    copyAcrossDevices(dst, src.contiguous());
    return;
  }
  if (!dst.isContiguous()) {  // through a contiguous tensor on its own device
    Tensor staged = Tensor::empty(dst.sizes(), dst.dtype(), dst.device());
    copyAcrossDevices(staged, src);
    dst.copyFrom(staged);
    return;
  }
  const size_t bytes = static_cast<size_t>(dst.numel()) * dtypeSize(dst.dtype());
  const cuda::CopyKind kind = src.device().isCpu()   ? cuda::CopyKind::HostToDevice
                              : dst.device().isCpu() ? cuda::CopyKind::DeviceToHost
                                                     : cuda::CopyKind::DeviceToDevice;
  cuda::copySync(dst.rawData(), src.rawData(), bytes, kind);
}
}  // namespace

void Tensor::copyFrom(const Tensor& src) {
  APS_CHECK(src.sizes() == sizes(), "copy: shapes {} and {} do not match", src.shapeString(), shapeString());
  if (device().isCuda() || src.device().isCuda()) {
    copyAcrossDevices(*this, src);
    return;
  }
  const size_t dstSize = dtypeSize(dtype()), srcSize = dtypeSize(src.dtype());
  auto* dst = static_cast<std::byte*>(storage()->data());
  const auto* from = static_cast<const std::byte*>(src.storage()->data());
  if (dtype() == src.dtype() && isContiguous() && src.isContiguous()) {
    if (numel() > 0)
      std::memmove(dst + storageOffset() * dstSize, from + src.storageOffset() * srcSize, numel() * dstSize);
    return;
  }
  // Gather the source offsets first so that overlapping views copy as if through a temporary.
  std::vector<int64_t> srcOffsets(static_cast<size_t>(numel()));
  forEachElement(src.sizes(), src.strides(), src.storageOffset(),
                 [&](int64_t i, int64_t off) { srcOffsets[static_cast<size_t>(i)] = off; });
  std::vector<double> values(srcOffsets.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = readElement(from + srcOffsets[i] * srcSize, src.dtype());
  if (dtype() == src.dtype() && dtype() == DType::Int64) {
    // Int64 through double would lose bits above 2^53: copy raw bytes instead.
    std::vector<int64_t> raw(srcOffsets.size());
    for (size_t i = 0; i < raw.size(); ++i) std::memcpy(&raw[i], from + srcOffsets[i] * 8, 8);
    forEachElement(sizes(), strides(), storageOffset(),
                   [&](int64_t i, int64_t off) { std::memcpy(dst + off * 8, &raw[static_cast<size_t>(i)], 8); });
    return;
  }
  forEachElement(sizes(), strides(), storageOffset(), [&](int64_t i, int64_t off) {
    writeElement(dst + off * dstSize, dtype(), values[static_cast<size_t>(i)]);
  });
}

void Tensor::fill(double v) {
  if (device().isCuda()) {
    APS_CHECK(isContiguous() && (v == 0.0 || dtype() == DType::Float32),
              "fill: a tensor on {} can be filled when contiguous, with zeros or as float32 (shape {}, {})",
              deviceName(device()), shapeString(), dtypeName(dtype()));
    if (v == 0.0) {
      cuda::zeroAsync(rawData(), static_cast<size_t>(numel()) * dtypeSize(dtype()), nullptr);
    } else {
      cuda::fillFloatAsync(data<float>(), numel(), static_cast<float>(v), nullptr);
    }
    return;
  }
  auto* base = static_cast<std::byte*>(storage()->data());
  const size_t elem = dtypeSize(dtype());
  if (dtype() == DType::Float32 && isContiguous()) {
    // numel() multiplies out the shape: once, not per element (it made zero_grad of a
    // ResNet-50 run at 0.8 GB/s, 5% of a step; docs/PERFORMANCE.md).
    std::fill_n(data<float>(), numel(), static_cast<float>(v));
    return;
  }
  forEachElement(sizes(), strides(), storageOffset(),
                 [&](int64_t, int64_t off) { writeElement(base + off * elem, dtype(), v); });
}

namespace {
int64_t elementOffsetOf(const Tensor& t, std::initializer_list<int64_t> index) {
  APS_CHECK(static_cast<int64_t>(index.size()) == t.dim(), "index of rank {} used on a tensor of shape {}",
            index.size(), t.shapeString());
  int64_t off = t.storageOffset();
  size_t d = 0;
  for (int64_t i : index) {
    APS_CHECK(i >= 0 && i < t.sizes()[d], "index {} is out of range for dim {} of shape {}", i, d, t.shapeString());
    off += i * t.strides()[d];
    ++d;
  }
  return off;
}
}  // namespace

double Tensor::value(std::initializer_list<int64_t> index) const {
  if (device().isCuda()) {
    const int64_t off = elementOffsetOf(*this, index);
    std::byte element[8];
    cuda::copySync(element, static_cast<const std::byte*>(storage()->data()) + off * dtypeSize(dtype()),
                   dtypeSize(dtype()), cuda::CopyKind::DeviceToHost);
    if (dtype() == DType::Int64) {
      int64_t v;
      std::memcpy(&v, element, 8);
      return static_cast<double>(v);
    }
    return readElement(element, dtype());
  }
  const auto* base = static_cast<const std::byte*>(storage()->data());
  if (dtype() == DType::Int64) {
    int64_t v;
    std::memcpy(&v, base + elementOffsetOf(*this, index) * 8, 8);
    return static_cast<double>(v);
  }
  return readElement(base + elementOffsetOf(*this, index) * dtypeSize(dtype()), dtype());
}

void Tensor::setValue(std::initializer_list<int64_t> index, double v) {
  if (device().isCuda()) {
    std::byte element[8];
    writeElement(element, dtype(), v);
    cuda::copySync(static_cast<std::byte*>(storage()->data()) + elementOffsetOf(*this, index) * dtypeSize(dtype()),
                   element, dtypeSize(dtype()), cuda::CopyKind::HostToDevice);
    return;
  }
  auto* base = static_cast<std::byte*>(storage()->data());
  writeElement(base + elementOffsetOf(*this, index) * dtypeSize(dtype()), dtype(), v);
}

float Tensor::item() const {
  APS_CHECK(numel() == 1, "item: tensor of shape {} has {} elements, not 1", shapeString(), numel());
  if (device().isCuda()) return to(Device::cpu()).item();
  const auto* base = static_cast<const std::byte*>(storage()->data());
  return static_cast<float>(readElement(base + storageOffset() * dtypeSize(dtype()), dtype()));
}

std::vector<float> Tensor::toFloatVector() const {
  if (device().isCuda()) return contiguous().to(Device::cpu()).toFloatVector();
  Tensor f = dtype() == DType::Float32 ? contiguous() : to(DType::Float32);
  const float* p = f.data<float>();
  return std::vector<float>(p, p + f.numel());
}

template <typename T>
std::vector<T> Tensor::toVector() const {
  APS_CHECK(dtypeMatches<T>(dtype()), "toVector: element type does not match dtype {}", dtypeName(dtype()));
  if (device().isCuda()) return contiguous().to(Device::cpu()).toVector<T>();
  Tensor c = contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}
template std::vector<float> Tensor::toVector<float>() const;
template std::vector<uint16_t> Tensor::toVector<uint16_t>() const;
template std::vector<uint8_t> Tensor::toVector<uint8_t>() const;
template std::vector<int32_t> Tensor::toVector<int32_t>() const;
template std::vector<int64_t> Tensor::toVector<int64_t>() const;

template <typename T>
T* Tensor::data() const {
  APS_CHECK(dtypeMatches<T>(dtype()), "data: element type does not match dtype {}", dtypeName(dtype()));
  return static_cast<T*>(rawData());
}
template float* Tensor::data<float>() const;
template uint16_t* Tensor::data<uint16_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;
template int32_t* Tensor::data<int32_t>() const;
template int64_t* Tensor::data<int64_t>() const;

void* Tensor::rawData() const {
  return static_cast<std::byte*>(storage()->data()) + storageOffset() * static_cast<int64_t>(dtypeSize(dtype()));
}

BufferView Tensor::buffer() const {
  APS_CHECK(isContiguous(), "buffer: tensor of shape {} is not contiguous", shapeString());
  return BufferView{rawData(), numel(), dtype(), device()};
}

Tensor& Tensor::setRequiresGrad(bool on) {
  APS_CHECK(!on || dtype() == DType::Float32, "setRequiresGrad: only float32 tensors can require grad, got {}",
            dtypeName(dtype()));
  APS_CHECK(isLeaf(), "setRequiresGrad: only leaf tensors can change requiresGrad (shape {})", shapeString());
  impl().autograd().requiresGrad = on;
  return *this;
}

Tensor Tensor::grad() const {
  auto& slots = impl().autograd();
  if (!slots.grad) return Tensor();
  Tensor g(slots.grad);
  if (slots.gradZeroPending) {
    slots.gradZeroPending = false;
    g.zero();
  }
  return g;
}

void Tensor::setGrad(const Tensor& grad) {
  if (grad.defined()) {
    APS_CHECK(grad.sizes() == sizes(), "setGrad: gradient shape {} does not match tensor shape {}", grad.shapeString(),
              shapeString());
  }
  impl().autograd().grad = grad.implPtr();
  impl().autograd().gradZeroPending = false;
}

}  // namespace aps
