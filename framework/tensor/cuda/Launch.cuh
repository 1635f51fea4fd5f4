#pragma once

// Launch geometry shared by aps's CUDA kernels (.cu files only): grid-stride loops of
// kThreads threads per block, with no more blocks than the work needs and at most
// kMaxBlocks, so one launch covers any size and every thread has work.

#include <cuda_runtime.h>

#include <cstdint>

namespace aps::cuda::launch {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;

inline unsigned gridFor(int64_t units, int64_t maxBlocks = kMaxBlocks) {
  const int64_t blocks = (units + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < maxBlocks ? blocks : maxBlocks));
}

__device__ inline int64_t firstIndex() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t gridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace aps::cuda::launch
