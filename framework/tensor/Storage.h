#pragma once

#include "framework/tensor/Device.h"

#include <cstddef>
#include <memory>

namespace aps {

// Owns a block of bytes (c10 style): tensors are views onto a Storage, so reshape, permute
// and slicing share it. CPU memory is aligned to kAlignment bytes for SIMD loads.
class Storage {
 public:
  static constexpr size_t kAlignment = 64;  // CpuAllocator::kAlignment

  // Uninitialised memory of `bytes` bytes (zeroed when `zeroed`).
  explicit Storage(size_t bytes, bool zeroed = false, Device device = Device::cpu());
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

}  // namespace aps
