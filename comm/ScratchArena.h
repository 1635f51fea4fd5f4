#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace aps::comm {

// Scratch memory an all-reduce reuses from call to call: numbered slots that only grow and
// are never zeroed. Allocating (and page-faulting) fresh encode buffers on every bucket
// cost more than the reduction itself.
class ScratchArena {
 public:
  // At least `bytes` bytes for `slot`, valid until the next call for the same slot with a
  // larger size. Contents are unspecified.
  uint8_t* bytes(size_t slot, size_t bytes);
  float* floats(size_t slot, size_t count) { return reinterpret_cast<float*>(bytes(slot, count * sizeof(float))); }

 private:
  struct Block {
    std::unique_ptr<uint8_t[]> data;
    size_t size = 0;
  };
  std::vector<Block> blocks_;
};

}  // namespace aps::comm
