#include "framework/ops/cpu/Workspace.h"

#include "framework/core/Error.h"

#include <array>
#include <cstdlib>
#include <new>

namespace aps::cpu {

namespace {

struct Buffer {
  float* data = nullptr;
  int64_t capacity = 0;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { std::free(data); }
};

thread_local std::array<Buffer, Workspace::kSlots> tBuffers;

}  // namespace

float* Workspace::get(int slot, int64_t count) {
  APS_ASSERT(slot >= 0 && slot < kSlots && count >= 0);
  Buffer& buffer = tBuffers[static_cast<size_t>(slot)];
  if (count > buffer.capacity) {
    // Grow by at least half again so that slowly growing requests do not reallocate each call.
    int64_t capacity = count + count / 2;
    capacity = (capacity + 15) / 16 * 16;  // aligned_alloc needs a multiple of the alignment
    std::free(buffer.data);
    buffer.data = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(capacity) * sizeof(float)));
    if (buffer.data == nullptr) throw std::bad_alloc();
    buffer.capacity = capacity;
  }
  return buffer.data;
}

}  // namespace aps::cpu
