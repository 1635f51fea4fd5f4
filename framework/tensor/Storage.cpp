#include "framework/tensor/Storage.h"

#include "framework/core/Error.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace aps {

Storage::Storage(size_t bytes, bool zeroed, Device device) : bytes_(bytes), device_(device) {
  APS_CHECK(device.isCpu(), "Storage: only cpu storage is supported here, got {}", deviceName(device));
  if (bytes == 0) return;
  // std::aligned_alloc needs a size that is a multiple of the alignment.
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  data_ = std::aligned_alloc(kAlignment, rounded);
  if (data_ == nullptr) throw std::bad_alloc();
  if (zeroed) std::memset(data_, 0, rounded);
}

Storage::~Storage() { std::free(data_); }

}  // namespace aps
