#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace aps {

// Aligned host memory with a cache of freed blocks, keyed by size. A training step allocates
// the same activation and gradient sizes every iteration; reusing the blocks avoids the
// mmap/munmap and page-fault cost of fresh large allocations (docs/ARCHITECTURE.md, CPU speed: reuse buffers across
// steps). Thread-safe. Blocks of kMinCachedBytes or more go to one shared cache (a lock);
// smaller ones to a cache of the thread that frees them (no lock, at most kThreadCacheBytes
// a thread), since at one image per simulated rank every activation is small and the C
// allocator's bookkeeping for them cost 5% of a step.
class CpuAllocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kMinCachedBytes = size_t{1} << 16;
  static constexpr size_t kThreadCacheBytes = size_t{64} << 20;

  static CpuAllocator& instance();

  void* allocate(size_t bytes);
  void release(void* data, size_t bytes);

  // Frees every block of the shared cache and of the calling thread's; limits how many bytes
  // the shared cache may hold (default 4 GiB; a thread's holds the smaller of that and
  // kThreadCacheBytes). cachedBytes: the shared cache's bytes and the calling thread's.
  void emptyCache();
  void setCacheLimit(size_t bytes);
  size_t cachedBytes() const;
  // Blocks taken from the C allocator so far, rather than from a cache: a training step that
  // has run once takes none (tests/models/TrainingTest.cpp).
  uint64_t freshAllocations() const { return fresh_.load(std::memory_order_relaxed); }

 private:
  CpuAllocator() = default;
  static size_t roundUp(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  std::atomic<size_t> limit_{size_t{4} << 30};
  std::atomic<uint64_t> fresh_{0};
};

}  // namespace aps
