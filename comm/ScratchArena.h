#pragma once

#include "framework/tensor/Device.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace aps::cuda {
class DeviceScratch;
}

namespace aps::comm {

// Scratch memory an all-reduce reuses from call to call: numbered slots that only grow and
// are never zeroed. Allocating (and page-faulting) fresh encode buffers on every bucket
// cost more than the reduction itself. Host memory, or, for an all-reduce over device buffers,
// device memory from the caching allocator (released in stream order: a slot that grows may
// still be used by work queued on the calling thread's stream, to whose pool the old block goes
// back, CudaAllocator).
class ScratchArena {
 public:
  explicit ScratchArena(Device device = Device::cpu());
  ~ScratchArena();
  ScratchArena(ScratchArena&&) noexcept;
  ScratchArena& operator=(ScratchArena&&) noexcept;

  Device device() const { return device_; }

  // At least `bytes` bytes for `slot`, valid until the next call for the same slot with a
  // larger size. Contents are unspecified.
  uint8_t* bytes(size_t slot, size_t bytes);
  float* floats(size_t slot, size_t count) { return reinterpret_cast<float*>(bytes(slot, count * sizeof(float))); }

 private:
  struct Block {
    std::unique_ptr<uint8_t[]> data;
    std::unique_ptr<cuda::DeviceScratch> device;
    size_t size = 0;
  };
  Device device_;
  std::vector<Block> blocks_;
};

}  // namespace aps::comm
