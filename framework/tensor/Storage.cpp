#include "framework/tensor/Storage.h"

#include "framework/core/Error.h"
#include "framework/tensor/CpuAllocator.h"

#include <cstring>

namespace aps {

Storage::Storage(size_t bytes, bool zeroed, Device device) : bytes_(bytes), device_(device) {
  APS_CHECK(device.isCpu(), "Storage: only cpu storage is supported here, got {}", deviceName(device));
  if (bytes == 0) return;
  data_ = CpuAllocator::instance().allocate(bytes);
  if (zeroed) std::memset(data_, 0, bytes);
}

Storage::~Storage() { CpuAllocator::instance().release(data_, bytes_); }

}  // namespace aps
