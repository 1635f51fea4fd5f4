#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace aps {

// Aligned host memory with a cache of freed blocks, keyed by size. A training step allocates
// the same activation and gradient sizes every iteration; reusing the blocks avoids the
// mmap/munmap and page-fault cost of fresh large allocations (docs/ARCHITECTURE.md, CPU speed: reuse buffers across
// steps). Thread-safe. Small blocks go straight to the C allocator.
class CpuAllocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kMinCachedBytes = size_t{1} << 16;

  static CpuAllocator& instance();

  void* allocate(size_t bytes);
  void release(void* data, size_t bytes);

  // Frees every cached block; limits how many bytes the cache may hold (default 4 GiB).
  void emptyCache();
  void setCacheLimit(size_t bytes);
  size_t cachedBytes() const;

 private:
  CpuAllocator() = default;
  static size_t roundUp(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  size_t limit_ = size_t{4} << 30;
};

}  // namespace aps
