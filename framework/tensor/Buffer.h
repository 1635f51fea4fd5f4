#pragma once

#include "framework/tensor/DType.h"
#include "framework/tensor/Device.h"

#include <cstdint>

namespace aps {

// A plain, non-owning view of contiguous elements: what the precision and comm modules
// see of a tensor (pointer, count, dtype, device), so they never depend on autograd or nn.
struct BufferView {
  void* data = nullptr;
  int64_t count = 0;
  DType dtype = DType::Float32;
  Device device = Device::cpu();

  size_t bytes() const { return static_cast<size_t>(count) * dtypeSize(dtype); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

}  // namespace aps
