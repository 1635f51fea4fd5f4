#include "comm/ScratchArena.h"

#include "framework/tensor/cuda/CudaAllocator.h"

namespace aps::comm {

ScratchArena::ScratchArena(Device device) : device_(device) {}
ScratchArena::~ScratchArena() = default;
ScratchArena::ScratchArena(ScratchArena&&) noexcept = default;
ScratchArena& ScratchArena::operator=(ScratchArena&&) noexcept = default;

uint8_t* ScratchArena::bytes(size_t slot, size_t bytes) {
  if (slot >= blocks_.size()) blocks_.resize(slot + 1);
  Block& b = blocks_[slot];
  const size_t size = bytes > 0 ? bytes : 1;
  if (device_.isCuda()) {
    if (b.size < size || !b.device) {
      b.device.reset();
      b.device = std::make_unique<cuda::DeviceScratch>(size, device_.index);
      b.size = size;
    }
    return static_cast<uint8_t*>(b.device->data());
  }
  if (b.size < bytes || !b.data) {
    // new[] of a trivial type leaves the bytes uninitialised (no zeroing pass). Aligned for floats.
    b.data.reset(new uint8_t[size]);
    b.size = bytes;
  }
  return b.data.get();
}

}  // namespace aps::comm
