#include "comm/ScratchArena.h"

namespace aps::comm {

uint8_t* ScratchArena::bytes(size_t slot, size_t bytes) {
  if (slot >= blocks_.size()) blocks_.resize(slot + 1);
  Block& b = blocks_[slot];
  if (b.size < bytes || !b.data) {
    // new[] of a trivial type leaves the bytes uninitialised (no zeroing pass). Aligned for floats.
    b.data.reset(new uint8_t[bytes > 0 ? bytes : 1]);
    b.size = bytes;
  }
  return b.data.get();
}

}  // namespace aps::comm
