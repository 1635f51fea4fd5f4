#include "framework/tensor/Storage.h"

#include "framework/core/Error.h"
#include "framework/tensor/CpuAllocator.h"
#include "framework/tensor/cuda/CudaAllocator.h"
#include "framework/tensor/cuda/CudaRuntime.h"

#include <cstring>

namespace aps {

Storage::Storage(size_t bytes, bool zeroed, Device device) : bytes_(bytes), device_(device) {
  if (device.isCuda()) {
    cuda::requireDevice(device.index, "a tensor on " + deviceName(device));
    if (bytes == 0) return;
    data_ = cuda::CudaAllocator::instance().allocate(bytes, device.index);
    if (zeroed) cuda::zeroAsync(data_, bytes, nullptr);
    return;
  }
  if (bytes == 0) return;
  data_ = CpuAllocator::instance().allocate(bytes);
  if (zeroed) std::memset(data_, 0, bytes);
}

Storage::~Storage() {
  if (device_.isCuda()) {
    cuda::CudaAllocator::instance().release(data_, bytes_, device_.index);
    return;
  }
  CpuAllocator::instance().release(data_, bytes_);
}

}  // namespace aps
