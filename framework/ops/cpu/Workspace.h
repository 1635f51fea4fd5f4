#pragma once

#include <cstdint>

namespace aps::cpu {

// Per-thread, grow-only scratch memory for the CPU kernels (im2col matrices, GEMM
// staging, partial sums). Reusing it across calls keeps allocation out of the training
// step; OpenMP's worker threads persist, so each keeps its buffers between kernels.
class Workspace {
 public:
  static constexpr int kSlots = 8;
  // The calling thread's buffer `slot` (0 <= slot < kSlots) with room for at least `count`
  // floats, 64-byte aligned. Its contents are undefined; a later call with the same slot on
  // the same thread may move it.
  static float* get(int slot, int64_t count);
};

}  // namespace aps::cpu
